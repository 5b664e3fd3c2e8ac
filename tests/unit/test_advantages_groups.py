"""Group baselines (whileai.advantages.groups): the figures of 7.5, the RLOO identity, the binomial push, and
property tests against per-group references written with the statistics module."""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from whileai.advantages import (
    STD_EPS,
    expected_group_push,
    group_advantages,
    group_center_batch_scale,
    rloo_advantages,
    whiten,
    zero_variance_fraction,
)

ONE_IN_EIGHT = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])


def test_single_success_group_of_eight():
    mean = group_advantages(ONE_IN_EIGHT, 8, scale="none")
    rloo = rloo_advantages(ONE_IN_EIGHT, 8)
    normed = group_advantages(ONE_IN_EIGHT, 8)
    assert mean[0].item() == pytest.approx(0.875) and mean[1].item() == pytest.approx(-0.125)
    assert rloo[0].item() == pytest.approx(1.0) and round(rloo[1].item(), 3) == -0.143
    assert round(normed[0].item(), 2) == 2.47 and round(normed[1].item(), 2) == -0.35
    assert torch.allclose(mean / rloo, torch.full((8,), 7 / 8))


def test_normalization_scales_of_7_5():
    four = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0])
    scale_one = group_advantages(ONE_IN_EIGHT, 8)[0] / group_advantages(ONE_IN_EIGHT, 8, scale="none")[0]
    scale_four = group_advantages(four, 8)[0] / group_advantages(four, 8, scale="none")[0]
    assert round(scale_one.item(), 2) == 2.83
    assert round(scale_four.item(), 2) == 1.87


@pytest.mark.parametrize(("p", "ratio"), [(0.5, 1.98), (0.1, 2.49), (0.05, 2.64)])
def test_difficulty_bias_ratios(p, ratio):
    assert round(expected_group_push(p, 8, True) / expected_group_push(p, 8, False), 2) == ratio


@pytest.mark.parametrize("normalize", [False, True])
def test_expected_push_equals_enumeration_of_outcomes(normalize):
    """Exact expectation checked by enumerating all 2**G outcomes through group_advantages itself."""
    group, p = 6, 0.3
    total = 0.0
    for outcome in itertools.product([0.0, 1.0], repeat=group):
        k = sum(outcome)
        prob = p**k * (1 - p) ** (group - k)
        adv = group_advantages(torch.tensor(outcome, dtype=torch.float64), group, "group" if normalize else "none")
        total += prob * adv.abs().sum().item()
    assert expected_group_push(p, group, normalize) == pytest.approx(total, rel=1e-12)
    pushes = expected_group_push(torch.tensor([0.0, p, 1.0], dtype=torch.float64), group, normalize)
    assert pushes[0] == 0 and pushes[2] == 0 and pushes[1].item() == pytest.approx(total, rel=1e-12)


groups_of = st.integers(2, 9).flatmap(
    lambda g: st.tuples(
        st.just(g),
        st.lists(st.floats(-10, 10, allow_nan=False), min_size=g, max_size=6 * g).map(
            lambda xs: xs[: len(xs) - len(xs) % g]
        ),
    )
)


@settings(max_examples=150, deadline=None)
@given(groups_of)
def test_rloo_identity_and_group_references(case):
    g, values = case
    rewards = torch.tensor(values, dtype=torch.float64)
    rloo = rloo_advantages(rewards, g)
    centered = group_advantages(rewards, g, scale="none")
    assert torch.allclose(rloo, centered * g / (g - 1), atol=1e-12)  # A_RLOO = G/(G-1) (R - mean)
    normed = group_advantages(rewards, g)
    batch = group_advantages(rewards, g, scale="batch")
    batch_std = statistics.stdev(values) if len(values) > 1 else 0.0
    for start in range(0, len(values), g):
        group = values[start : start + g]
        mean, std = statistics.fmean(group), statistics.stdev(group)
        for i, x in enumerate(group):
            others = [y for j, y in enumerate(group) if j != i]
            assert rloo[start + i].item() == pytest.approx(x - statistics.fmean(others), abs=1e-9)
            assert normed[start + i].item() == pytest.approx((x - mean) / (std + STD_EPS), abs=1e-9)
            assert batch[start + i].item() == pytest.approx((x - mean) / (batch_std + STD_EPS), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(groups_of)
def test_group_center_batch_scale_is_centered_with_unit_batch_std(case):
    g, values = case
    rewards = torch.tensor(values, dtype=torch.float64)
    out = group_center_batch_scale(rewards, g)
    centered = group_advantages(rewards, g, scale="none")
    assert torch.allclose(out.view(-1, g).sum(1), torch.zeros(len(values) // g, dtype=torch.float64), atol=1e-9)
    spread = centered.std().item() if len(values) > 1 else 0.0
    assert torch.allclose(out, centered / (spread + STD_EPS), atol=1e-12)


def test_zero_variance_groups():
    rewards = torch.tensor([0.0] * 8 + [1.0] * 8 + [1.0] + [0.0] * 7)
    assert zero_variance_fraction(rewards, 8).item() == pytest.approx(2 / 3)
    adv = group_advantages(rewards, 8)
    assert torch.equal(adv[:16], torch.zeros(16))  # zero variance: zero advantage, not NaN
    assert torch.isfinite(adv).all()


def test_batch_whitening_versus_group_centering():
    """7.7: batch whitening pushes down every failure of an unsolved task; group centering leaves it at 0."""
    unsolved = [0.0] * 8
    easy = [1.0] * 6 + [0.0] * 2
    rewards = torch.tensor(unsolved + easy)
    whitened = whiten(rewards)
    assert (whitened[:8] < 0).all()
    assert torch.equal(group_advantages(rewards, 8, scale="none")[:8], torch.zeros(8))
    assert torch.equal(group_center_batch_scale(rewards, 8)[:8], torch.zeros(8))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=2, max_size=50), st.data())
def test_whiten_matches_reference_on_selected_entries(values, data):
    keep = data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    x = torch.tensor(values, dtype=torch.float64)
    out = whiten(x, torch.tensor(keep))
    chosen = [v for v, k in zip(values, keep, strict=True) if k]
    for v, k, o in zip(values, keep, out.tolist(), strict=True):
        if not k:
            assert o == 0
        elif len(chosen) > 1:
            expected = (v - statistics.fmean(chosen)) / (statistics.stdev(chosen) + STD_EPS)
            assert o == pytest.approx(expected, abs=1e-9)


def test_dtypes_and_errors():
    half = ONE_IN_EIGHT.to(torch.bfloat16)
    assert group_advantages(half, 8).dtype == torch.bfloat16
    assert rloo_advantages(half, 8).dtype == torch.bfloat16
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(10), 8)
    with pytest.raises(ValueError):
        group_advantages(ONE_IN_EIGHT, 8, scale="token")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rloo_advantages(ONE_IN_EIGHT, 1)
    with pytest.raises(ValueError):
        expected_group_push(1.5, 8, True)


# --- the product path: float32 on the CPU, groups of 2, 4, 8 or 16 -----------------------------------------------


@pytest.mark.parametrize("group", [2, 4, 8])
@pytest.mark.parametrize("kind", ["binary", "partial credit", "continuous"])
def test_product_path_equals_float64(group, kind):
    """float32 on the CPU centers with one [N/16, 16] @ [16, 16] product: every estimator within float32 rounding of
    the float64 path (which never takes it)."""
    from whileai.advantages.groups import _mixes_by_product

    gen = torch.Generator().manual_seed(group)
    n = 16 * 50
    rewards = {
        "binary": (torch.rand(n, generator=gen) < 0.3).float(),
        "partial credit": torch.randint(0, 5, (n,), generator=gen).float() / 4,
        "continuous": torch.randn(n, generator=gen) * 3 + 10,
    }[kind]
    assert _mixes_by_product(rewards.view(-1, group))
    cases = {
        "group": lambda x: group_advantages(x, group),
        "batch": lambda x: group_advantages(x, group, scale="batch"),
        "none": lambda x: group_advantages(x, group, scale="none"),
        "rloo": lambda x: rloo_advantages(x, group),
        "center, batch scale": lambda x: group_center_batch_scale(x, group),
    }
    for name, estimator in cases.items():
        fast, reference = estimator(rewards), estimator(rewards.double())
        assert fast.dtype == torch.float32, name
        scale = max(1.0, reference.abs().max().item())
        assert (fast.double() - reference).abs().max().item() <= 2e-6 * scale, name


def test_product_path_keeps_zero_variance_groups_at_zero():
    rewards = torch.tensor([0.0] * 8 + [1.0] * 8 + [1.0] + [0.0] * 7 + [0.5] * 8)
    adv = group_advantages(rewards, 8)
    assert torch.equal(adv[:16], torch.zeros(16)) and torch.equal(adv[24:], torch.zeros(8))
    assert torch.equal(rloo_advantages(rewards, 8)[:16], torch.zeros(16))
    assert torch.isfinite(adv).all()


def test_product_path_steps_aside_where_tf32_could_round():
    """With a reduced float32 matmul precision the plain path runs: same numbers, no rounded product."""
    from whileai.advantages.groups import _mixes_by_product

    rewards = torch.randn(64, generator=torch.Generator().manual_seed(0)) + 100
    exact = group_advantages(rewards, 8)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        assert not _mixes_by_product(rewards.view(-1, 8))
        plain = group_advantages(rewards, 8)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert torch.allclose(plain, exact, atol=1e-5)
    assert not _mixes_by_product(torch.zeros(24).view(-1, 8))  # N not a multiple of 16
    assert not _mixes_by_product(torch.zeros(48).view(-1, 3))  # 3 does not divide 16
    assert not _mixes_by_product(torch.zeros(64).view(-1, 16))  # 16: the plain path is faster
