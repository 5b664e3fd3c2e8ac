"""Token-level estimators (whileai.advantages.returns, .turns, .scan): the chapter's figures, property tests against
slow per-row references written here with plain Python loops, and the no-step-per-token guarantee."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from whileai.advantages import (
    gae_advantages,
    nstep_returns,
    outcome_rewards,
    returns_to_go,
    td_errors,
    turn_advantages,
)
from whileai.advantages.scan import PolicyLayout, discounted_reverse_scan

# --- slow references: one row at a time, one position at a time -------------------------------------------------


def ref_row(r, v, m, gamma, lam):
    """Masked recursions of 7.1-7.3 on one row: returns (returns-to-go, td errors, gae advantages)."""
    size = len(r)
    g_out, d_out, a_out = [0.0] * size, [0.0] * size, [0.0] * size
    next_v = next_a = next_g = 0.0
    for t in reversed(range(size)):
        if not m[t]:
            continue
        d = r[t] + gamma * next_v - v[t]
        a = d + gamma * lam * next_a
        g = r[t] + gamma * next_g
        g_out[t], d_out[t], a_out[t] = g, d, a
        next_v, next_a, next_g = v[t], a, g
    return g_out, d_out, a_out


def ref_nstep(r, v, m, n, gamma):
    policy = [t for t in range(len(r)) if m[t]]
    out = [0.0] * len(r)
    for i, t in enumerate(policy):
        total = sum(gamma**k * r[policy[i + k]] for k in range(n) if i + k < len(policy))
        if i + n < len(policy):
            total += gamma**n * v[policy[i + n]]
        out[t] = total
    return out


def ref_turns(r, v, m, gamma, lam, ids=None):
    """Turn-level GAE on one row: turns are contiguous policy spans, or runs of equal ids over policy tokens."""
    turns: list[list[int]] = []
    prev_t = prev_id = None
    for t in range(len(r)):
        if not m[t]:
            continue
        new = prev_t is None or (ids[t] != prev_id if ids is not None else t != prev_t + 1)
        if new:
            turns.append([])
        turns[-1].append(t)
        prev_t, prev_id = t, (ids[t] if ids is not None else None)
    rewards = [sum(r[t] for t in turn) for turn in turns]
    values = [v[turn[0]] for turn in turns]
    adv, tgt = [0.0] * len(r), [0.0] * len(r)
    next_v = next_a = 0.0
    for k in reversed(range(len(turns))):
        a = rewards[k] + gamma * next_v - values[k] + gamma * lam * next_a
        for t in turns[k]:
            adv[t], tgt[t] = a, a + values[k]
        next_v, next_a = values[k], a
    return adv, tgt


def naive_stepping_gae(r, v, gamma, lam):
    """The bug of 7.3: every position is a step, so tool positions' values are bootstrapped from."""
    out = [0.0] * len(r)
    next_v = next_a = 0.0
    for t in reversed(range(len(r))):
        a = r[t] + gamma * next_v - v[t] + gamma * lam * next_a
        out[t] = a
        next_v, next_a = v[t], a
    return out


def rows_of(x: torch.Tensor):
    return [row.tolist() for row in x]


# --- the hand-built row of 7.1 -------------------------------------------------------------------------------------

ROW_MASK = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]])  # calls of 2, 2, 1 tokens; tool spans of 3 and 2
ROW_VALUES = torch.tensor([[0.5, 0.4, 9, 9, 9, 0.6, 0.7, 9, 9, 0.8]], dtype=torch.float64)  # 9: garbage at tools


def row_rewards() -> torch.Tensor:
    return outcome_rewards(torch.tensor([1.0], dtype=torch.float64), ROW_MASK, call_costs=0.1)


def test_outcome_rewards_place_costs_and_outcome():
    expected = [0, -0.1, 0, 0, 0, 0, -0.1, 0, 0, 0.9]
    assert row_rewards()[0].tolist() == pytest.approx(expected)


def test_outcome_rewards_per_row_costs_and_empty_rows():
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0]])
    out = outcome_rewards(torch.tensor([2.0, 5.0, 3.0]), mask, call_costs=torch.tensor([0.5, 0.5, 1.0]))
    assert out.tolist() == [[0, 0, 1.5, 0], [0, 0, 0, 0], [-1, 0, 2, 0]]


def test_returns_to_go_hand_built_row_gamma_one():
    g = returns_to_go(row_rewards(), ROW_MASK)[0]
    assert g[0].item() == pytest.approx(0.7) and g[1].item() == pytest.approx(0.7)  # -0.1 - 0.1 + 0.9
    assert g[2:5].tolist() == [0, 0, 0]  # tool positions carry 0


def test_returns_to_go_hand_built_row_gamma_09():
    g = returns_to_go(row_rewards(), ROW_MASK, gamma=0.9)[0]
    assert g[5].item() == pytest.approx(0.639)
    assert g[1].item() == pytest.approx(-0.1 + 0.9 * 0.639)  # discounted once across the tool span
    assert round(g[1].item(), 3) == 0.475


def test_gae_anchors_against_naive_stepping():
    r = row_rewards()
    lam1, _ = gae_advantages(r, ROW_VALUES, ROW_MASK, lam=1.0)
    expected = (returns_to_go(r, ROW_MASK) - ROW_VALUES) * ROW_MASK
    assert torch.allclose(lam1, expected, atol=1e-12)
    lam0, _ = gae_advantages(r, ROW_VALUES, ROW_MASK, lam=0.0)
    assert lam0[0, 1].item() == pytest.approx(-0.1 + 0.6 - 0.4)  # 0.1: bootstraps from V(c5), not the 9
    naive = naive_stepping_gae(r[0].tolist(), ROW_VALUES[0].tolist(), 1.0, 0.0)
    assert naive[1] == pytest.approx(8.5) and naive[6] == pytest.approx(8.2)
    assert lam0[0, 6].item() == pytest.approx(-0.1 + 0.8 - 0.7)


# --- property tests against the references ------------------------------------------------------------------------


@st.composite
def batches(draw, max_rows=4, max_len=40):
    rows = draw(st.integers(1, max_rows))
    length = draw(st.integers(1, max_len))
    cell = st.floats(-5, 5, allow_nan=False, width=64)
    r = torch.tensor(draw(st.lists(st.lists(cell, min_size=length, max_size=length), min_size=rows, max_size=rows)))
    v = torch.tensor(draw(st.lists(st.lists(cell, min_size=length, max_size=length), min_size=rows, max_size=rows)))
    m = torch.tensor(
        draw(st.lists(st.lists(st.booleans(), min_size=length, max_size=length), min_size=rows, max_size=rows))
    )
    return r.to(torch.float64), v.to(torch.float64), m


unit = st.floats(0, 1)


@settings(max_examples=100, deadline=None)
@given(batches(), unit, unit)
def test_batched_equals_per_row_reference(batch, gamma, lam):
    r, v, m = batch
    g = returns_to_go(r, m, gamma)
    d = td_errors(r, v, m, gamma)
    a, targets = gae_advantages(r, v, m, gamma, lam)
    for row in range(r.shape[0]):
        ref_g, ref_d, ref_a = ref_row(r[row].tolist(), v[row].tolist(), m[row].tolist(), gamma, lam)
        assert g[row].tolist() == pytest.approx(ref_g, abs=1e-9)
        assert d[row].tolist() == pytest.approx(ref_d, abs=1e-9)
        assert a[row].tolist() == pytest.approx(ref_a, abs=1e-9)
    assert torch.allclose(targets, (a + v) * m, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(batches(), unit, st.integers(1, 12))
def test_nstep_equals_reference(batch, gamma, n):
    r, v, m = batch
    out = nstep_returns(r, v, m, n, gamma)
    for row in range(r.shape[0]):
        ref = ref_nstep(r[row].tolist(), v[row].tolist(), m[row].tolist(), n, gamma)
        assert out[row].tolist() == pytest.approx(ref, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(batches(), unit)
def test_nstep_beyond_length_is_returns_to_go(batch, gamma):
    r, v, m = batch
    assert torch.allclose(nstep_returns(r, v, m, r.shape[1], gamma), returns_to_go(r, m, gamma), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(batches(), unit)
def test_lambda_one_gae_is_return_minus_value_for_any_values(batch, gamma):
    r, v, m = batch
    a, _ = gae_advantages(r, v, m, gamma, 1.0)
    assert torch.allclose(a, (returns_to_go(r, m, gamma) - v) * m, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(batches(), unit, unit, st.floats(-1e6, 1e6))
def test_garbage_at_non_policy_positions_changes_nothing(batch, gamma, lam, garbage):
    r, v, m = batch
    r2 = torch.where(m, r, garbage)
    v2 = torch.where(m, v, -garbage)
    assert torch.equal(returns_to_go(r, m, gamma), returns_to_go(r2, m, gamma))
    assert torch.equal(td_errors(r, v, m, gamma), td_errors(r2, v2, m, gamma))
    assert torch.equal(nstep_returns(r, v, m, 3, gamma), nstep_returns(r2, v2, m, 3, gamma))
    for x, y in zip(gae_advantages(r, v, m, gamma, lam), gae_advantages(r2, v2, m, gamma, lam), strict=True):
        assert torch.equal(x, y)
    for x, y in zip(turn_advantages(r, v, m, gamma, lam), turn_advantages(r2, v2, m, gamma, lam), strict=True):
        assert torch.equal(x, y)


@settings(max_examples=60, deadline=None)
@given(batches(max_rows=1), st.floats(0, 0.999), unit, st.data())
def test_inserting_tool_spans_changes_no_policy_output(batch, gamma, lam, data):
    r, v, m = batch
    m = m.clone()
    m[0, 0] = True
    length = r.shape[1]
    # Insert a span of mask-0 positions (with garbage) after some positions.
    spans = data.draw(st.lists(st.integers(0, 5), min_size=length, max_size=length))
    cols, new_mask, new_r, new_v, ids = [], [], [], [], []
    call = 0
    for t in range(length):
        cols.append(len(new_mask))
        new_mask.append(bool(m[0, t]))
        new_r.append(float(r[0, t]))
        new_v.append(float(v[0, t]))
        call += 0 if (t == 0 or (m[0, t] and m[0, t - 1])) else 1
        ids.append(call)
        for _ in range(spans[t]):
            new_mask.append(False)
            new_r.append(7.0)
            new_v.append(-9.0)
            ids.append(call)
    m2 = torch.tensor([new_mask])
    r2, v2 = torch.tensor([new_r], dtype=torch.float64), torch.tensor([new_v], dtype=torch.float64)
    keep = torch.tensor(cols)
    ids1 = torch.tensor([ids])[:, keep]

    def same(before, after):
        assert torch.allclose(before, after[:, keep], atol=1e-12)

    same(returns_to_go(r, m, gamma), returns_to_go(r2, m2, gamma))
    same(td_errors(r, v, m, gamma), td_errors(r2, v2, m2, gamma))
    same(nstep_returns(r, v, m, 2, gamma), nstep_returns(r2, v2, m2, 2, gamma))
    for x, y in zip(gae_advantages(r, v, m, gamma, lam), gae_advantages(r2, v2, m2, gamma, lam), strict=True):
        same(x, y)
    # Turns: the inserted spans would split calls, so keep the calls of the original row with turn_ids.
    for x, y in zip(
        turn_advantages(r, v, m, gamma, lam, turn_ids=ids1),
        turn_advantages(r2, v2, m2, gamma, lam, turn_ids=torch.tensor([ids])),
        strict=True,
    ):
        same(x, y)


@settings(max_examples=100, deadline=None)
@given(batches(), unit, unit, st.booleans())
def test_turn_advantages_equal_reference(batch, gamma, lam, with_ids):
    r, v, m = batch
    ids = torch.randint(0, 3, r.shape, generator=torch.Generator().manual_seed(int(r.abs().sum() * 1000) % 2**31))
    ids = ids.cumsum(1) // 2 if with_ids else None
    a, tgt = turn_advantages(r, v, m, gamma, lam, turn_ids=ids)
    for row in range(r.shape[0]):
        ref_a, ref_t = ref_turns(
            r[row].tolist(), v[row].tolist(), m[row].tolist(), gamma, lam, None if ids is None else ids[row].tolist()
        )
        assert a[row].tolist() == pytest.approx(ref_a, abs=1e-9)
        assert tgt[row].tolist() == pytest.approx(ref_t, abs=1e-9)


def test_turn_advantages_one_step_per_call():
    # Calls of 3 and 2 tokens: lambda = 0 gives one TD error per call, shared by its tokens.
    mask = torch.tensor([[0, 1, 1, 1, 0, 0, 1, 1]])
    r = torch.tensor([[5.0, 0, 0, -0.1, 5, 5, 0, 1.0]])
    v = torch.tensor([[9.0, 0.3, 9, 9, 9, 9, 0.5, 9]])
    a, tgt = turn_advantages(r, v, mask, gamma=0.9, lam=0.0)
    first = -0.1 + 0.9 * 0.5 - 0.3
    assert a[0].tolist() == pytest.approx([0, first, first, first, 0, 0, 0.5, 0.5])
    assert tgt[0, 1].item() == pytest.approx(first + 0.3)


# --- the scan itself, long rows, dtypes ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.sampled_from([0.0, 0.3, 0.9, 0.999, 1.0]))
def test_scan_matches_loop_across_chunk_levels(length, g):
    x = torch.randn(2, length, dtype=torch.float64, generator=torch.Generator().manual_seed(length))
    y = discounted_reverse_scan(x, g)
    ref = torch.zeros_like(x)
    acc = torch.zeros(2, dtype=torch.float64)
    for t in reversed(range(length)):
        acc = x[:, t] + g * acc
        ref[:, t] = acc
    assert torch.allclose(y, ref, atol=1e-9, rtol=1e-9)


def test_policy_layout_round_trip():
    mask = torch.tensor([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    x = torch.arange(15.0).view(3, 5)
    layout = PolicyLayout(mask)
    assert layout.counts.tolist() == [3, 0, 5]
    assert layout.pack(x)[:, :5].tolist() == [[1, 3, 4, 0, 0], [0, 0, 0, 0, 0], [10, 11, 12, 13, 14]]
    assert torch.equal(layout.unpack(layout.pack(x)), x * mask)


def test_long_rows_match_float64_reference():
    """30,000 tokens at gamma * lam < 1 and at 1: no overflow, float32 input within float32 accuracy."""
    gen = torch.Generator().manual_seed(0)
    rows, length = 2, 30_000
    r = torch.randn(rows, length, generator=gen, dtype=torch.float64) * 0.01
    v = torch.randn(rows, length, generator=gen, dtype=torch.float64)
    m = torch.rand(rows, length, generator=gen) < 0.6
    for gamma, lam in [(0.99, 0.95), (1.0, 1.0), (0.999, 0.0)]:
        a64, _ = gae_advantages(r, v, m, gamma, lam)
        a32, _ = gae_advantages(r.float(), v.float(), m, gamma, lam)
        assert a32.dtype == torch.float32
        ref = torch.tensor([ref_row(r[i].tolist(), v[i].tolist(), m[i].tolist(), gamma, lam)[2] for i in range(rows)])
        assert torch.isfinite(a64).all()
        assert torch.allclose(a64, ref.to(torch.float64), atol=1e-9)
        assert torch.allclose(a32.double(), ref.to(torch.float64), atol=2e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_output_dtype_follows_rewards(dtype):
    r, v, m = torch.ones(2, 6, dtype=dtype), torch.zeros(2, 6, dtype=dtype), torch.ones(2, 6, dtype=torch.bool)
    assert returns_to_go(r, m).dtype == dtype
    assert all(x.dtype == dtype for x in gae_advantages(r, v, m, 0.9, 0.9))
    assert all(x.dtype == dtype for x in turn_advantages(r, v, m))
    assert returns_to_go(r, m)[0, 0].item() == pytest.approx(6.0)


def test_rejects_bad_discounts_and_shapes():
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError):
        returns_to_go(r, torch.ones(2, 3), gamma=1.5)
    with pytest.raises(ValueError):
        gae_advantages(r, r, torch.ones(2, 3), lam=-0.1)
    with pytest.raises(ValueError):
        td_errors(r, torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError):
        nstep_returns(r, r, torch.ones(2, 3), n=0)


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "estimator",
    [
        lambda r, v, m: returns_to_go(r, m, 0.99),
        lambda r, v, m: gae_advantages(r, v, m, 0.99, 0.95),
        lambda r, v, m: nstep_returns(r, v, m, 5, 0.99),
        lambda r, v, m: turn_advantages(r, v, m, 0.99, 0.95),
    ],
)
def test_no_python_step_per_token(estimator):
    """The number of tensor ops grows like log T, not T: 30,000 tokens cost at most a few more ops than 100."""
    counts = []
    for length in (100, 30_000):
        r, v = torch.randn(4, length), torch.randn(4, length)
        m = (torch.arange(length) % 80) < 50
        with _CountOps() as ops:
            estimator(r, v, m.expand(4, length))
        counts.append(ops.count)
    assert counts[1] <= counts[0] + 40, counts


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(1)
    r, v = torch.randn(8, 5000, generator=gen), torch.randn(8, 5000, generator=gen)
    m = torch.rand(8, 5000, generator=gen) < 0.6
    on_gpu = gae_advantages(r.cuda(), v.cuda(), m.cuda(), 0.99, 0.95)
    for cpu, gpu in zip(gae_advantages(r, v, m, 0.99, 0.95), on_gpu, strict=True):
        assert gpu.device.type == "cuda"
        assert torch.allclose(cpu, gpu.cpu(), atol=1e-4)
    assert math.isclose(returns_to_go(r.cuda(), m.cuda()).sum().item(), returns_to_go(r, m).sum().item(), rel_tol=1e-3)
