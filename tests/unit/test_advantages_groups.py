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
from whileai.advantages.native import native_available

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


# --- the numba loop (native.centered_native) and the torch path ---------------------------------------------------

ESTIMATORS = {
    "group": lambda x, g: group_advantages(x, g),
    "batch": lambda x, g: group_advantages(x, g, scale="batch"),
    "none": lambda x, g: group_advantages(x, g, scale="none"),
    "rloo": rloo_advantages,
    "center, batch scale": group_center_batch_scale,
}


def torch_path(fn, *args):
    """``fn(*args)`` with the numba kernel switched off (``WHILEAI_NO_NATIVE=1``): the path CUDA takes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WHILEAI_NO_NATIVE", "1")
        return fn(*args)


def float64_reference(rewards: torch.Tensor, group: int, name: str) -> torch.Tensor:
    """Each estimator from its definition, in float64, group by group (centered after subtracting the group's first
    reward, exact in float64, so that a large common offset costs the reference no digits)."""
    x = rewards.double().view(-1, group)  # [N/G, G]
    shifted = x - x[:, :1]
    centered = shifted - shifted.mean(1, keepdim=True)
    if name == "group":
        return (centered / (shifted.std(1, keepdim=True) + STD_EPS)).view(-1)
    if name == "batch":
        return (centered / ((x - x[0, 0]).std() + STD_EPS)).view(-1)
    if name == "rloo":
        return (centered * group / (group - 1)).view(-1)
    if name == "center, batch scale":
        return (centered / (centered.std() + STD_EPS)).view(-1)
    return centered.view(-1)


rewards_kinds = st.sampled_from(["binary", "partial credit", "continuous", "offset"])


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([2, 3, 4, 5, 7, 8, 9, 16, 24]),
    st.integers(1, 150),  # groups
    rewards_kinds,
    st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**31 - 1),
)
def test_kernel_and_torch_path_equal_the_float64_reference(group, groups, kind, dtype, seed):
    """Both paths within float32 rounding (float64: 1e-12) of the definition, with ties and flat groups among them."""
    gen = torch.Generator().manual_seed(seed)
    n = group * groups
    rewards = {
        "binary": (torch.rand(n, generator=gen) < 0.3).double(),
        "partial credit": torch.randint(0, 5, (n,), generator=gen).double() / 4,
        "continuous": torch.randn(n, generator=gen, dtype=torch.float64) * 3,
        "offset": torch.randn(n, generator=gen, dtype=torch.float64) * 0.01 + 100,  # spread far below the offset
    }[kind].to(dtype)
    tolerance = 3e-6 if dtype == torch.float32 else 1e-12
    for name, estimator in ESTIMATORS.items():
        reference = float64_reference(rewards, group, name)
        scale = max(1.0, reference.abs().max().item())
        for path, out in (("kernel", estimator(rewards, group)), ("torch", torch_path(estimator, rewards, group))):
            assert out.dtype == dtype, (name, path)
            assert (out.double() - reference).abs().max().item() <= tolerance * scale, (name, path)


@pytest.mark.parametrize("group", [2, 3, 5, 6, 7, 8, 12, 16, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_rewards_give_exactly_zero(group, dtype):
    """A zero-variance group carries no gradient: exactly 0 on both paths, at any group size (a float32 sum of five
    copies of 123.456 is not five times it: the sum is shifted by the group's first reward)."""
    flat = (0, 5, 9)  # the first group, one in the middle and the last
    for value in (0.1, 0.7, 1 / 3, 123.456, -5e6):
        grouped = torch.arange(float(group)).repeat(10, 1)  # [10, G]
        grouped[list(flat)] = value
        rewards = grouped.view(-1).to(dtype)
        for name, estimator in ESTIMATORS.items():
            for out in (estimator(rewards, group), torch_path(estimator, rewards, group)):
                if name in ("group", "none", "rloo"):
                    for g in flat:
                        assert torch.equal(out.view(10, group)[g], torch.zeros(group, dtype=dtype)), (name, value, g)
                assert torch.isfinite(out).all(), (name, value)


@pytest.mark.parametrize("group", [2, 4, 8, 16])
def test_nan_and_inf_rewards_stay_in_their_group_on_both_paths(group):
    """A NaN reward makes its group NaN (an infinite one NaN or -inf), nowhere else with a group scale; with a batch
    scale everything. The kernel gives exactly what the torch path gives."""
    nan, inf = float("nan"), float("inf")
    gen = torch.Generator().manual_seed(group)
    # 83 groups, poisoned ones among them: the first, the last but one and some in between
    rewards = (torch.rand(group * 83, generator=gen) < 0.5).float()
    rewards[1] = nan  # group 0
    rewards[group] = inf  # group 1, first member
    rewards[3 * group + 1] = inf  # group 3, not the first member
    rewards[5 * group], rewards[5 * group + 1] = inf, -inf  # group 5
    rewards[81 * group] = -inf  # group 81, first member
    poisoned = {0, 1, 3, 5, 81}
    for name, estimator in ESTIMATORS.items():
        fused, plain = estimator(rewards, group), torch_path(estimator, rewards, group)
        torch.testing.assert_close(fused, plain, equal_nan=True, atol=3e-6, rtol=3e-6, msg=name)
        finite_groups = torch.isfinite(fused).view(-1, group).all(1)
        if name in ("batch", "center, batch scale"):
            assert not finite_groups.any(), name
        else:
            assert {int(g) for g in torch.nonzero(~finite_groups)} == poisoned, name


def test_a_large_group_gives_what_the_torch_path_gives():
    rewards = torch.rand(136 * 3, generator=torch.Generator().manual_seed(0))
    for name, estimator in ESTIMATORS.items():
        torch.testing.assert_close(estimator(rewards, 136), torch_path(estimator, rewards, 136), msg=name)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.bfloat16, torch.float16])
def test_other_reward_dtypes_compute_in_float32_on_both_paths(dtype):
    """Integer, bool and half rewards are upcast to float32 before either path runs, and come back in the rewards'
    dtype (the default float dtype for integers and bools)."""
    rewards = (torch.arange(48) % 5 == 0).to(dtype)  # [48], six groups of 8, some flat
    expected = torch.get_default_dtype() if not dtype.is_floating_point else dtype
    for name, estimator in ESTIMATORS.items():
        fused, plain = estimator(rewards, 8), torch_path(estimator, rewards, 8)
        reference = estimator(rewards.float(), 8).to(expected)
        assert fused.dtype == plain.dtype == expected, name
        torch.testing.assert_close(fused, reference, msg=name)
        torch.testing.assert_close(plain, reference, msg=name)


def test_a_strided_view_of_rewards_gives_what_its_copy_gives():
    """The numba loop reads a non-contiguous ``[N]`` (a column of a bigger tensor) through a contiguous copy."""
    table = torch.rand(64, 3)
    column = table[:, 1]  # stride 3
    assert not column.is_contiguous()
    for name, estimator in ESTIMATORS.items():
        torch.testing.assert_close(estimator(column, 8), estimator(column.contiguous(), 8), msg=name)


def test_the_kernel_serves_the_cpu_and_steps_aside_where_it_must(monkeypatch):
    from whileai.advantages.native import centered_native

    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    if native_available():
        torch.testing.assert_close(centered_native(rewards, 8), group_advantages(rewards, 8, scale="none"))
    assert centered_native(rewards.to(torch.bfloat16), 8) is None  # the caller upcasts first
    assert centered_native(rewards.requires_grad_(), 8) is None  # a gradient needs the torch path
    adv = rloo_advantages(rewards, 8)
    adv.sum().backward()
    assert rewards.grad is not None
    monkeypatch.setenv("WHILEAI_NO_NATIVE", "1")
    assert not native_available()
    assert centered_native(rewards.detach(), 8) is None
    assert torch.equal(rloo_advantages(rewards.detach(), 8), adv.detach())
