"""What a verifier can hand TRL never moves the signal off equation 3: a confirmed hack sits with the failures under
any reward scale, a reward float32 cannot hold is unscorable, a verifier's None leaves its group graded on the rest,
and every kind of number TRL takes is taken by every arm.

The advantages are computed as TRL 1.16 computes them (``grpo_trainer.py``, ``_generate_and_score_completions``,
one reward function, ``scale_rewards="none"``): the rewards stored as float32, a NaN-aware group mean subtracted,
``nan_to_num`` after.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import whileai as wai
from whileai.grading.trl import binary_reward
from whileai.methods import positive_passes, rank_factors, redistribute
from whileai.rows.rewards import FLOAT32_LIMIT, verifier_reward

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


def trl_advantages(shaped: list, size: int) -> list[float]:
    """TRL's advantage of a reward function's output, in TRL's own dtype and operations."""
    rewards = torch.tensor([r if r is not None else torch.nan for r in shaped], dtype=torch.float32)  # [B]
    mean = torch.nanmean(rewards.view(-1, size), dim=1).repeat_interleave(size)  # [B]
    return torch.nan_to_num(rewards - mean, nan=0.0).tolist()


def trl_stores(value) -> float:
    """One reward as TRL 1.16 stores a reward function's output (``_calculate_rewards``): None as NaN, then
    ``torch.tensor(..., dtype=torch.float32)`` assigned into its column of ``rewards_per_func``."""
    output = [value if value is not None else torch.nan] * 2  # a verifier that returns this for two completions
    rewards_per_func = torch.zeros(2, 1)
    rewards_per_func[:, 0] = torch.tensor(output, dtype=torch.float32)
    return rewards_per_func[0, 0].item()


def by_index(group):
    """Ranks the passes by index, names as hacks the passes whose completion says so."""
    hacks = [g["index"] for g in group if g["passed"] and "hack" in g["completion"]]
    return {"ranking": [g["index"] for g in group if g["passed"] and g["index"] not in hacks], "hacks": hacks}


# The properties here are the reading of rewards and answers, not the processes (whileai.isolation, in
# tests/unit/test_isolation.py): graders and verifiers keep to this process, which the hundreds of examples need.
by_index.in_process = True  # type: ignore[attr-defined]


def fixed(rewards):
    """A verifier that answers ``rewards``, in this process."""

    def verifier(**kwargs):
        return rewards

    verifier.in_process = True
    return verifier


SCALES = {
    "binary": st.sampled_from([0.0, 1.0]),
    "plus-minus one": st.sampled_from([-1.0, 1.0]),
    "partial credit": st.sampled_from([-0.5, 0.0, 0.25, 0.5, 1.0]),
}


@st.composite
def groups_with_hacks(draw, scale: str):
    size = draw(st.integers(min_value=2, max_value=8))
    rewards = draw(st.lists(SCALES[scale], min_size=size, max_size=size))
    passes = [i for i, r in enumerate(rewards) if r > 0]
    hacks = sorted(draw(st.sets(st.sampled_from(passes), max_size=len(passes)))) if passes else []
    return rewards, hacks


# ---------------------------------------------------------------- a confirmed hack is a failure


@pytest.mark.parametrize("scale", list(SCALES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_hack_gets_a_failure_s_advantage_on_every_reward_scale(scale, data) -> None:
    rewards, hacks = data.draw(groups_with_hacks(scale))
    advantages = redistribute(rewards, hacks=hacks)
    lowest = min(0.0, min(rewards))
    for i in hacks:
        # the lowest advantage of the group, equal to that of every member whose reward is the lowest
        assert advantages[i] == pytest.approx(min(advantages), abs=1e-12)
        for j, r in enumerate(rewards):
            if j not in hacks and r == lowest:
                assert advantages[i] == pytest.approx(advantages[j], abs=1e-12)
    # and TRL, handed the reward function's output, trains on exactly these advantages
    size = len(rewards)
    gar = wai.GroupwiseGrading(grader=by_index)
    completions = ["hack" if i in hacks else "ok" for i in range(size)]
    reward = gar.trl_reward(fixed(rewards), num_generations=size)
    trained = trl_advantages(reward(prompts=["p"] * size, completions=completions), size)
    if positive_passes(rewards):
        passes = [i for i, r in enumerate(rewards) if r > 0 and i not in hacks]
        expected = redistribute(rewards, rank_factors(passes, passes) if passes else {}, hacks=hacks)
    else:  # no pass above the mean (an all-pass group, say): nothing to move, the grader is not asked
        expected = redistribute(rewards)
    assert trained == pytest.approx(expected, abs=1e-6)


def test_a_hack_under_a_plus_minus_one_verifier_is_not_above_the_failures() -> None:
    assert redistribute([1, 1, -1, -1], hacks=[1]) == [1.5, -0.5, -0.5, -0.5]
    gar = wai.GroupwiseGrading(grader=by_index)
    (group,) = gar.grade_batch([1, 1, -1, -1], ["p"] * 4, ["ok", "hack", "no", "no"], group_size=4)
    assert group.effective_rewards == [1.0, -1.0, -1.0, -1.0] and group.advantages == [1.5, -0.5, -0.5, -0.5]
    assert gar.stats.hacks_zeroed == 1


def test_a_hack_reward_knob_sets_another_value() -> None:
    gar = wai.GroupwiseGrading(grader=by_index, hack_reward=-2.0)
    assert "hack_reward=-2.0" in repr(gar)
    (group,) = gar.grade_batch([1, 1, 0, 0], ["p"] * 4, ["ok", "hack", "no", "no"], group_size=4)
    assert group.effective_rewards == [1.0, -2.0, 0.0, 0.0]
    assert group.advantages == pytest.approx(redistribute([1, 1, 0, 0], hacks=[1], hack_reward=-2.0))
    with pytest.raises(ValueError, match="hack_reward"):
        wai.GroupwiseGrading(grader=by_index, hack_reward=math.inf)


# ---------------------------------------------------------------- what float32 cannot hold


@settings(max_examples=100, deadline=None)
@given(
    big=st.one_of(st.floats(min_value=FLOAT32_LIMIT, allow_infinity=True), st.floats(max_value=-FLOAT32_LIMIT)),
    position=st.integers(min_value=0, max_value=7),
)
def test_a_reward_float32_holds_only_as_inf_leaves_the_rest_of_its_group_finite(big, position) -> None:
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    rewards[position] = big
    gar = wai.GroupwiseGrading(grader=by_index)
    for reward in (gar.trl_reward(fixed(rewards), 8), binary_reward(fixed(rewards), 8)):
        trained = trl_advantages(reward(prompts=["p"] * 8, completions=["ok"] * 8), 8)
        assert trained[position] == 0.0 and all(abs(a) <= 1 for a in trained), trained
    assert gar.stats.unscorable == 1 and gar.stats.failed == 0


# ---------------------------------------------------------------- a verifier's None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rewards=st.lists(st.sampled_from([0.0, 1.0]), min_size=8, max_size=8),
    missing=st.sets(st.integers(min_value=0, max_value=7), max_size=8),
)
def test_a_group_with_a_none_is_graded_on_its_scorable_members(rewards, missing) -> None:
    given_rewards = [None if i in missing else r for i, r in enumerate(rewards)]
    seen = []

    def grader(group):
        seen.append([g["completion"] for g in group])
        return by_index(group)

    def verifier(**kwargs):
        return given_rewards

    # The property is the reading of the rewards, not the processes: both keep to this one (150 examples).
    grader.in_process = verifier.in_process = True
    gar = wai.GroupwiseGrading(grader=grader)
    completions = [f"c{i}" for i in range(8)]
    trained = trl_advantages(gar.trl_reward(verifier, 8)(prompts=["p"] * 8, completions=completions), 8)
    kept = [i for i in range(8) if i not in missing]
    scored = [rewards[i] for i in kept]
    expected = [0.0] * 8
    if scored:
        passes = [k for k, r in enumerate(scored) if r > 0]
        moved = redistribute(scored, rank_factors(passes, passes) if passes else {})
        for k, i in enumerate(kept):
            expected[i] = moved[k]
    assert trained == pytest.approx(expected, abs=1e-6)
    # the grader read the scorable members only, and it was called whenever they held a pass and a failure
    mixed = any(scored) and not all(scored)
    assert seen == ([[completions[i] for i in kept]] if mixed else [])
    assert gar.stats.failed == 0 and gar.stats.unscorable == len(missing) and gar.stats.mixed == int(mixed)


def test_the_spread_gate_counts_nones_as_the_verifier_s_not_the_grader_s() -> None:
    rows = [
        {"scenario_id": s, "reward": r, "final_text": t}
        for s in ("a", "b", "c")
        for r, t in ((1, "<tool_call>x"), (1, "y"), (None, "z"), (0, "w"))
    ]
    report = wai.GroupwiseGrading(grader=lambda g: {"ranking": [x["index"] for x in g if x["passed"]]}).check_spread(
        rows, strict=False
    )
    assert report.verdict == "yes" and report.failed == {} and report.unscorable == 3
    assert "3 completion(s) the verifier could not score" in str(report)


# ---------------------------------------------------------------- every number TRL takes


ACCEPTED = [
    1,
    0.5,
    True,
    None,
    10**30,
    Decimal("0.25"),
    Fraction(1, 3),
    np.float32(0.5),
    np.float64(-1.0),
    np.float16(2.0),
    np.int64(3),
    np.bool_(True),
    torch.tensor(0.0),
    torch.tensor(1),
    torch.tensor(True),
    torch.tensor([0.75]),
    torch.tensor(1.5, dtype=torch.bfloat16),
    torch.tensor(1e39, dtype=torch.float64),
    float("nan"),
    -math.inf,
    1e39,
]
REFUSED = ["1", b"1", 1 + 2j, [1.0], torch.tensor([1.0, 2.0]), {"reward": 1}]


@pytest.mark.parametrize("value", ACCEPTED, ids=repr)
def test_verifier_reward_takes_what_trl_takes_as_trl_stores_it(value) -> None:
    stored = trl_stores(value)
    ours = verifier_reward(value)
    if math.isfinite(stored):
        assert torch.tensor([ours], dtype=torch.float32).item() == stored
    else:
        assert math.isnan(ours)  # unscorable, never an inf for TRL's nan_to_num


@pytest.mark.parametrize("value", REFUSED, ids=repr)
def test_verifier_reward_refuses_what_trl_refuses(value) -> None:
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        trl_stores(value)
    with pytest.raises(ValueError, match="not a number"):
        verifier_reward(value)


@pytest.mark.parametrize("mode", ["advantage", "reward"])
def test_every_arm_and_the_gate_take_the_same_rewards(mode) -> None:
    rewards = [torch.tensor(1.0), np.float32(1.0), np.bool_(False), Decimal(0), torch.tensor([1.0]), None, True, 0]
    texts = ["<tool_call>a", "b", "c", "d", "<tool_call><tool_call>e", "f", "g", "h"]

    def grader(*args):
        if mode == "reward":
            item, _ = args
            return {"solution": 1.0, "behavior": 0.5 if "<tool_call>" in item["completion"] else 1.0}
        return by_index(args[0])

    gar = wai.GroupwiseGrading(grader=grader, mode=mode)
    # a verifier of the user's: it answers in a process of its own, and every type reads there as here
    shaped = gar.trl_reward(lambda **kw: rewards, 4)(prompts=["p"] * 8, completions=texts)
    binary = binary_reward(lambda **kw: rewards, 4)(prompts=["p"] * 8, completions=texts)
    assert len(shaped) == len(binary) == 8 and math.isnan(shaped[5]) and math.isnan(binary[5])
    assert gar.stats.failed == 0 and gar.stats.unscorable == 1
    report = gar.check_spread(
        [{"scenario_id": "s", "reward": r, "final_text": t} for r, t in zip(rewards, texts, strict=True)],
        strict=False,
    )
    assert report.failed == {} and report.unscorable == 1 and len(report.scores) >= 2
