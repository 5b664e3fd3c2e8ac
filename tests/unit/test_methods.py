"""whileai.methods: equation 3, the rank-to-factor convention and equation 2."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from whileai.methods import positive_passes, rank_factors, redistribute, redistribute_result, synthesize_reward


@st.composite
def graded_groups(draw):
    """A binary group with at least one pass and one failure, and factors for some passes."""
    size = draw(st.integers(2, 16))
    rewards = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=size, max_size=size))
    assume(0 < sum(rewards) < size)
    passes = [i for i, r in enumerate(rewards) if r > 0]
    chosen = draw(st.lists(st.sampled_from(passes), unique=True))
    factors = {i: draw(st.floats(0.05, 1.0)) for i in chosen}
    return rewards, factors


def _centered(rewards):
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def test_page_example() -> None:
    assert redistribute([1, 1, 0, 0], factors={0: 1.0, 1: 0.5}) == [
        0.6666666666666666,
        0.3333333333333333,
        -0.5,
        -0.5,
    ]


@settings(max_examples=300, deadline=None)
@given(graded_groups())
def test_properties_when_the_cap_does_not_bind(case) -> None:
    rewards, factors = case
    result = redistribute_result(rewards, factors, cap=1e9)
    assert not result.fell_back and not result.capped
    original = _centered(rewards)
    passes = [i for i, r in enumerate(rewards) if r > 0]
    # failures keep their advantage
    for i, r in enumerate(rewards):
        if r <= 0:
            assert result.advantages[i] == pytest.approx(original[i], abs=1e-9)
    # mass on the passes is conserved
    assert sum(result.advantages[i] for i in passes) == pytest.approx(sum(original[i] for i in passes), abs=1e-9)
    # the group sums to zero
    assert sum(result.advantages) == pytest.approx(0.0, abs=1e-9)
    # relative weights are the grader's
    for i in passes:
        for j in passes:
            fi, fj = factors.get(i, 1.0), factors.get(j, 1.0)
            assert result.advantages[i] / result.advantages[j] == pytest.approx(fi / fj, rel=1e-9)


@settings(max_examples=300, deadline=None)
@given(graded_groups(), st.floats(1.0, 5.0))
def test_the_cap_holds_and_the_group_still_sums_to_zero(case, cap) -> None:
    rewards, factors = case
    result = redistribute_result(rewards, factors, cap=cap)
    assert result.lam <= cap + 1e-12
    assert sum(result.advantages) == pytest.approx(0.0, abs=1e-9)
    weighted = sum(factors.get(i, 1.0) * a for i, a in enumerate(_centered(rewards)) if rewards[i] > 0)
    uncapped = sum(a for i, a in enumerate(_centered(rewards)) if rewards[i] > 0) / weighted
    if abs(uncapped - cap) > 1e-9:  # away from the edge, where rounding decides
        assert result.capped == (uncapped > cap)


def test_a_binding_cap_pulls_the_factors_toward_one_and_conserves_the_mass() -> None:
    # lambda would be (0.5 + 0.5) / (0.5 * 0.1 + 0.5) = 1.82 uncapped; with cap 1.5 the factors are pulled toward 1
    result = redistribute_result([1, 1, 0, 0], {0: 0.1}, cap=1.5)
    assert result.capped and result.lam == 1.5
    assert result.advantages[2:] == pytest.approx([-0.5, -0.5], abs=1e-12)  # failures untouched
    assert result.advantages[0] + result.advantages[1] == pytest.approx(1.0)
    assert result.advantages[0] < 0.5 < result.advantages[1]  # the grader's order holds
    assert result.advantages[1] == pytest.approx(1.5 * 0.5)  # the best pass is amplified by exactly the cap
    # a lone pass has nothing to be told apart from, whatever its factor
    alone = redistribute_result([1, 0, 0, 0], {0: 0.1}, cap=3.0)
    assert alone.advantages == pytest.approx([0.75, -0.25, -0.25, -0.25], abs=1e-12)


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="cap must be a number >= 1"):
        redistribute([1, 1, 0, 0], {0: 0.5}, cap=0.5)


@st.composite
def partial_credit_groups(draw):
    """Any rewards (binary, partial credit, negative), passes by R > 0, factors for some passes, a cap >= 1."""
    size = draw(st.integers(2, 12))
    reward = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.2]), st.floats(-1.0, 2.0, allow_nan=False))
    rewards = draw(st.lists(reward, min_size=size, max_size=size))
    passes = [i for i, r in enumerate(rewards) if r > 0]
    chosen = draw(st.lists(st.sampled_from(passes), unique=True)) if passes else []
    factors = {i: draw(st.floats(0.01, 1.0)) for i in chosen}
    cap = draw(st.one_of(st.just(3.0), st.floats(1.0, 10.0)))
    return rewards, factors, cap


@settings(max_examples=500, deadline=None)
@given(partial_credit_groups())
def test_partial_credit_never_inverts_the_grader(case) -> None:
    """Whatever the rewards: the best-ranked pass never loses advantage, the worst never gains, the mass of the
    passes is conserved, every other member keeps its advantage, the group sums to zero and the cap holds."""
    rewards, factors, cap = case
    result = redistribute_result(rewards, factors, cap=cap)
    original = _centered(rewards)
    assert sum(result.advantages) == pytest.approx(0.0, abs=1e-9)
    passes = [i for i, r in enumerate(rewards) if r > 0]
    if result.fell_back:
        assert result.advantages == original
        assert not any(original[i] > 1e-9 for i in passes)  # only when no pass sits above the mean
        return
    moving = [i for i in passes if original[i] > 1e-9]
    assert result.lam <= cap + 1e-12
    for i in range(len(rewards)):
        if i not in moving:  # failures, and passes at or below the mean
            assert result.advantages[i] == pytest.approx(original[i], abs=1e-9)
    assert sum(result.advantages[i] for i in moving) == pytest.approx(sum(original[i] for i in moving), abs=1e-9)
    f = {i: factors.get(i, 1.0) for i in moving}
    best, worst = max(f.values()), min(f.values())
    for i in moving:
        assert result.advantages[i] > 0  # a positive advantage stays positive
        if f[i] == best:
            assert result.advantages[i] >= original[i] - 1e-9
        if f[i] == worst:
            assert result.advantages[i] <= original[i] + 1e-9
        for j in moving:  # the grader's order of A'/A
            if f[i] > f[j]:
                assert result.advantages[i] / original[i] >= result.advantages[j] / original[j] - 1e-9


def test_a_pass_below_the_mean_is_not_moved() -> None:
    # [1, 0.2, 0, 0]: A = [0.7, -0.1, -0.3, -0.3]; ranking the 0.2 pass first must not push it further down
    ranked_low_first = redistribute([1, 0.2, 0, 0], factors={1: 1.0, 0: 0.5})
    assert ranked_low_first == pytest.approx([0.7, -0.1, -0.3, -0.3])
    # two passes above the mean of [1, 0.6, 0.2, 0, 0] share the moved mass; the 0.2 pass keeps its A
    result = redistribute_result([1, 0.6, 0.2, 0, 0], {0: 0.5, 1: 1.0, 2: 1.0})
    original = _centered([1, 0.6, 0.2, 0, 0])
    assert result.advantages[2] == pytest.approx(original[2])
    assert result.advantages[1] > original[1] and result.advantages[0] < original[0]
    assert result.advantages[0] + result.advantages[1] == pytest.approx(original[0] + original[1])


def test_positive_mass_zero_up_to_rounding_falls_back() -> None:
    # 0.1 + 0.2 != 0.3 in floating point: the passes differ by rounding only
    rewards = [0.1 + 0.2, 0.3, 0.3, 0.30000000000000004]
    result = redistribute_result(rewards, {0: 0.5})
    assert result.fell_back and "no pass has an advantage above zero" in result.reason
    assert positive_passes(rewards) == []
    assert positive_passes([1, 0.2, 0, 0]) == [0]


@pytest.mark.parametrize(
    ("factors", "passed", "reason"),
    [
        ({0: 0.0}, None, "outside (0, 1]"),
        ({0: 1.5}, None, "outside (0, 1]"),
        ({0: math.nan}, None, "outside (0, 1]"),
        ({2: 0.5}, None, "not a pass"),
        ({7: 0.5}, None, "not a pass"),
        ({"0": 0.5}, None, "not a pass"),
        ({0: True}, None, "outside (0, 1]"),
        (None, [9], "not a member"),
    ],
)
def test_bad_input_falls_back_to_the_original_advantages(factors, passed, reason) -> None:
    result = redistribute_result([1, 1, 0, 0], factors, passed=passed)
    assert result.fell_back and reason in result.reason
    assert result.advantages == [0.5, 0.5, -0.5, -0.5]
    assert redistribute([1, 1, 0, 0], factors, passed=passed) == [0.5, 0.5, -0.5, -0.5]


def test_all_pass_group_has_nothing_to_move() -> None:
    result = redistribute_result([1, 1, 1], {0: 0.5})
    assert result.fell_back and "zero" in result.reason
    assert result.advantages == [0.0, 0.0, 0.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=8), st.data())
def test_redistribute_never_raises_on_any_factor_map(rewards, data) -> None:
    factors = data.draw(st.dictionaries(st.integers(-2, 10), st.floats(allow_nan=True), max_size=4))
    out = redistribute(rewards, factors)
    assert len(out) == len(rewards) and all(math.isfinite(a) for a in out)


def test_missing_pass_gets_factor_one_and_explicit_passes() -> None:
    assert redistribute([1, 1, 0, 0], {0: 1.0}) == [0.5, 0.5, -0.5, -0.5]
    # a verifier that passes at reward 0: passes given explicitly
    out = redistribute([0.0, 0.0, -1.0, -1.0], {0: 1.0, 1: 0.5}, passed=[0, 1])
    assert out == pytest.approx([2 / 3, 1 / 3, -0.5, -0.5])


def test_rank_factors_linear_with_ties() -> None:
    assert rank_factors([0, 1, 2], [0, 1, 2]) == {0: 1.0, 1: 0.75, 2: 0.5}
    assert rank_factors([2, [0, 3], 1], [0, 1, 2, 3]) == {2: 1.0, 0: 0.75, 3: 0.75, 1: 0.5}
    # a tie at the top of three shares positions 0 and 1: (1.0 + 0.75) / 2
    assert rank_factors([[0, 1], 2], [0, 1, 2]) == {0: 0.875, 1: 0.875, 2: 0.5}
    assert rank_factors([[0, 1, 2]], [0, 1, 2]) == {0: 0.75, 1: 0.75, 2: 0.75}
    assert rank_factors([4], [4]) == {4: 1.0}
    assert rank_factors([], [1, 2]) == {}
    assert rank_factors([0, 1], [0, 1], min_factor=0.2) == {0: 1.0, 1: 0.2}


@settings(max_examples=200, deadline=None)
@given(st.permutations(list(range(6))), st.floats(0.01, 1.0))
def test_rank_factors_bounds_and_order(order, min_factor) -> None:
    factors = rank_factors(order, range(6), min_factor=min_factor)
    values = [factors[i] for i in order]
    assert values[0] == 1.0 and values[-1] == pytest.approx(min_factor)
    assert all(a >= b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize(
    ("ranking", "message"),
    [([0, 5], "not a pass"), ([0, 0], "twice"), ([[0, 1], 1], "twice"), ([[]], "empty tie"), (["a"], "integer")],
)
def test_rank_factors_rejects(ranking, message) -> None:
    with pytest.raises(ValueError, match=message):
        rank_factors(ranking, [0, 1, 2])


def test_rank_factors_min_factor_range() -> None:
    with pytest.raises(ValueError, match="min_factor"):
        rank_factors([0], [0], min_factor=0.0)


def test_synthesize_reward_equation_2() -> None:
    assert synthesize_reward(1.0, 0.9, 0.5) == pytest.approx(0.45)
    assert synthesize_reward(1.0, 0.0, 1.0) == 0.0
    assert synthesize_reward(1.0, 0.0, 0.2, floor=0.5) == 0.25
    assert synthesize_reward(0.0, 1.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="solution"):
        synthesize_reward(1.0, 1.2, 1.0)
    with pytest.raises(ValueError, match="floor"):
        synthesize_reward(1.0, 1.0, 1.0, floor=-0.1)
