"""The torch path of ``gae_advantages`` (CUDA's, the CPU's without numba, and that of inputs that require grad: policy
tokens packed by ``scan.PolicyLayout``, one ``scan.discounted_reverse_scan``) and the numba loop: against the chapter's
recursion token by token in float64, and against each other, across the scan's chunk boundaries."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from whileai.advantages import gae_advantages
from whileai.advantages.native import native_available
from whileai.advantages.returns import gae_packed
from whileai.advantages.scan import PolicyLayout


def packed_gae(r, v, m, gamma, lam):
    layout = PolicyLayout(m)
    adv, tgt = gae_packed(layout.pack(r), layout.pack(v), gamma, lam)
    return layout.unpack(adv), layout.unpack(tgt)


@pytest.mark.parametrize("length", [16, 1000, 4099])
def test_default_path_equals_packed_on_spans_and_random_masks(length):
    """Several rows, T a multiple of 16 or not, spans and random masks, at several discounts."""
    gen = torch.Generator().manual_seed(length)
    rows = 8
    r = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    v = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    spans = ((torch.arange(length) % 80) < 50).expand(rows, length)
    for m in (spans, torch.rand(rows, length, generator=gen) < 0.6):
        for gamma, lam in [(0.99, 0.95), (1.0, 1.0), (0.5, 0.3)]:
            adv, tgt = gae_advantages(r, v, m, gamma, lam)
            ref_adv, ref_tgt = packed_gae(r, v, m, gamma, lam)
            assert torch.allclose(adv, ref_adv, atol=1e-10)
            assert torch.allclose(tgt, ref_tgt, atol=1e-10)


def test_small_discounts_and_gradients():
    """gamma * lam near 0 and inputs that require grad: the packed path's numbers, and a gradient."""
    gen = torch.Generator().manual_seed(3)
    r, v = (
        torch.randn(2, 50, generator=gen, dtype=torch.float64),
        torch.randn(2, 50, generator=gen, dtype=torch.float64),
    )
    m = torch.rand(2, 50, generator=gen) < 0.5
    for lam in (0.0, 0.05):
        adv, _ = gae_advantages(r, v, m, 0.9, lam)
        assert torch.allclose(adv, packed_gae(r, v, m, 0.9, lam)[0], atol=1e-12)
    v_grad = v.clone().requires_grad_()
    adv, _ = gae_advantages(r, v_grad, m, 0.99, 0.95)
    adv.sum().backward()
    assert v_grad.grad is not None
    assert torch.allclose(adv.detach(), gae_advantages(r, v, m, 0.99, 0.95)[0], atol=1e-12)


def test_float32_long_spans_match_float64():
    gen = torch.Generator().manual_seed(4)
    r, v = torch.randn(4, 32768, generator=gen), torch.randn(4, 32768, generator=gen)
    m = ((torch.arange(32768) % 80) < 50).expand(4, 32768)
    adv32, tgt32 = gae_advantages(r, v, m, 0.99, 0.95)
    adv64, tgt64 = gae_advantages(r.double(), v.double(), m, 0.99, 0.95)
    assert adv32.dtype == torch.float32
    assert torch.allclose(adv32.double(), adv64, atol=1e-4)
    assert torch.allclose(tgt32.double(), tgt64, atol=1e-4)


# --- the torch path against the chapter's recursion, token by token ------------------------------------------------


def reference_gae(r: torch.Tensor, v: torch.Tensor, m: torch.Tensor, gamma: float, lam: float):
    """Equation (7.1) one token at a time in float64 Python floats: a tool position passes the next value and the
    running advantage on unchanged and is never read (garbage there stays out)."""
    rows, length = r.shape
    advantages = [[0.0] * length for _ in range(rows)]
    targets = [[0.0] * length for _ in range(rows)]
    for b in range(rows):
        rb, vb, mb = r[b].tolist(), v[b].tolist(), m[b].tolist()
        next_value = next_advantage = 0.0
        for t in reversed(range(length)):
            if mb[t]:
                advantage = rb[t] + gamma * next_value - vb[t] + gamma * lam * next_advantage
                advantages[b][t], targets[b][t] = advantage, advantage + vb[t]
                next_value, next_advantage = vb[t], advantage
    return torch.tensor(advantages, dtype=torch.float64), torch.tensor(targets, dtype=torch.float64)


def run_mask(rows: int, length: int, seed: int, longest: int = 40) -> torch.Tensor:
    """Calls and tool spans of random lengths (1 to ``longest`` tokens), alternating, from a random first kind."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(rows, length, dtype=torch.bool)
    for b in range(rows):
        t, policy = 0, bool(torch.rand((), generator=gen) < 0.5)
        while t < length:
            span = int(torch.randint(1, longest + 1, (), generator=gen))
            mask[b, t : t + span] = policy
            t, policy = t + span, not policy
    return mask


def garbage_case(mask: torch.Tensor, dtype: torch.dtype, seed: int):
    """Rewards and values with NaN, +inf or -inf at every tool position, and their clean float64 twins."""
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(mask.shape, generator=gen, dtype=torch.float64) * 0.1
    v = torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    garbage = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64)
    pick = torch.randint(0, 3, mask.shape, generator=gen)
    dirty_r, dirty_v = (torch.where(mask, x, garbage[pick]).to(dtype) for x in (r, v))
    # The reference reads what the estimator reads: the inputs rounded to its dtype, in float64.
    return dirty_r, dirty_v, dirty_r.double().nan_to_num(), dirty_v.double().nan_to_num()


def spans(rows: int, length: int) -> torch.Tensor:
    return ((torch.arange(length) % 80) < 50).expand(rows, length)


def mixed_rows(length: int) -> torch.Tensor:
    """An all-tool row, an all-policy row, a row of spans and a row of one token."""
    rows = torch.zeros(4, length, dtype=torch.bool)
    rows[1] = True
    rows[2] = spans(1, length)[0]
    rows[3, length // 2] = True
    return rows


TORCH_PATH_CASES = {
    "spans, T not a multiple of 16": (spans(4, 4099), 0.99, 0.95),
    "B=1, random mask": (torch.rand(1, 1000, generator=torch.Generator().manual_seed(1)) < 0.6, 0.9, 0.8),
    "all-tool, all-policy and one-token rows": (mixed_rows(515), 0.99, 0.95),
    "gamma = lambda = 1, 30,000-token rows": (spans(2, 30_000), 1.0, 1.0),
    "runs of 1 to 40 tokens": (run_mask(5, 2000, seed=3), 0.97, 0.9),
    "runs of 1 to 3 tokens": (run_mask(3, 777, seed=4, longest=3), 0.95, 0.5),
    "T = 5": (run_mask(3, 5, seed=5, longest=2), 0.99, 0.95),
    "T = 16": (run_mask(3, 16, seed=6, longest=4), 0.99, 0.95),
    "T = 17": (run_mask(3, 17, seed=7, longest=4), 0.99, 0.95),
    "gamma * lambda = 0.09": (run_mask(2, 3000, seed=8), 0.3, 0.3),
}


def torch_path_gae(r, v, m, gamma, lam):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WHILEAI_NO_NATIVE", "1")
        return gae_advantages(r, v, m, gamma, lam)


def assert_matches(result: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> None:
    """float64: 1e-9 of max |A|; float32: 1e-5 of max |A| (the bound of test_advantages_garbage's long rows)."""
    scale = max(1.0, reference.abs().max().item())
    tolerance = (1e-9 if dtype == torch.float64 else 1e-5) * scale
    assert result.dtype == dtype
    assert (result.double() - reference).abs().max().item() <= tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(TORCH_PATH_CASES))
def test_torch_path_equals_the_float64_recursion(case, dtype):
    """The torch path (CUDA's, and the CPU's without numba) against Equation (7.1) token by token, garbage at every tool
    position: outputs within float rounding of the float64 reference, and exactly 0 off the policy tokens."""
    mask, gamma, lam = TORCH_PATH_CASES[case]
    r, v, clean_r, clean_v = garbage_case(mask, dtype, seed=len(case))
    advantages, targets = torch_path_gae(r, v, mask, gamma, lam)
    ref_advantages, ref_targets = reference_gae(clean_r, clean_v, mask, gamma, lam)
    assert_matches(advantages, ref_advantages, dtype)
    assert_matches(targets, ref_targets, dtype)
    assert not advantages[~mask].any() and not targets[~mask].any()


@pytest.mark.skipif(not native_available(), reason="numba is not installed (the fast extra)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(TORCH_PATH_CASES))
def test_torch_path_equals_the_numba_kernel(case, dtype):
    mask, gamma, lam = TORCH_PATH_CASES[case]
    r, v, _, _ = garbage_case(mask, dtype, seed=len(case))
    fused = gae_advantages(r, v, mask, gamma, lam)
    scanned = torch_path_gae(r, v, mask, gamma, lam)
    for ours, theirs in zip(scanned, fused, strict=True):
        assert_matches(ours, theirs.double(), dtype)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 400),
    st.integers(1, 30),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
)
def test_torch_path_property(rows, length, longest, gamma, lam, seed):
    """Any shape, run structure and discounts, in float64."""
    mask = run_mask(rows, length, seed, longest)
    r, v, clean_r, clean_v = garbage_case(mask, torch.float64, seed)
    advantages, targets = torch_path_gae(r, v, mask, gamma, lam)
    ref_advantages, ref_targets = reference_gae(clean_r, clean_v, mask, gamma, lam)
    assert_matches(advantages, ref_advantages, torch.float64)
    assert_matches(targets, ref_targets, torch.float64)
