"""pass@k against brute force, the intervals' coverage by simulation, and how a figure prints."""

from __future__ import annotations

import itertools
import math
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import whileai
from whileai.simulations.agents import seeded_agent
from whileai.simulations.passrate import PassRate, bootstrap_interval, pass_at_k, score, wilson_interval
from whileai.simulations.rollouts import simulate


def brute_force_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The share of all k-subsets of the samples that contain at least one pass."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(subset) for subset in subsets) / len(subsets)


@given(st.lists(st.booleans(), min_size=1, max_size=10), st.data())
def test_pass_at_k_matches_brute_force(outcomes, data):
    k = data.draw(st.integers(1, len(outcomes)))
    assert pass_at_k(len(outcomes), sum(outcomes), k) == pytest.approx(brute_force_pass_at_k(outcomes, k))


@given(st.lists(st.lists(st.booleans(), min_size=3, max_size=6), min_size=1, max_size=5), st.integers(1, 3))
def test_scored_pass_at_averages_over_scenarios(groups, k):
    rows = [{"scenario_id": f"s{i}", "reward": float(passed)} for i, group in enumerate(groups) for passed in group]
    expected = sum(brute_force_pass_at_k(group, k) for group in groups) / len(groups)
    figure = score(rows).pass_at(k, resamples=50)
    assert figure.estimate == pytest.approx(expected)
    assert k == 1 or figure.low - 1e-12 <= figure.estimate <= figure.high + 1e-12


def test_pass_at_k_edges():
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 3, 3) == 1.0  # fewer failures than k: every draw has a pass
    with pytest.raises(ValueError, match=re.escape("1 <= k <= n")):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match=re.escape("[0, n]")):
        pass_at_k(3, 4, 1)


def test_a_figure_prints_like_the_page():
    rows = [{"scenario_id": f"refund-{i // 8}", "reward": float(i % 8 < 5)} for i in range(160)]
    printed = str(score(rows).pass_at(1))
    assert re.fullmatch(r"pass@1 0\.62 \(95% CI 0\.55 to 0\.70, n=160\)", printed), printed
    at_4 = score(rows).pass_at(4)
    assert str(at_4).startswith("pass@4 ") and str(at_4).endswith("n=20)") and at_4.n_of == "scenarios"
    assert (
        PassRate(1, 0.5, 0.4, 0.6, 10, "samples", confidence=0.9).__str__() == "pass@1 0.50 (90% CI 0.40 to 0.60, n=10)"
    )


def test_wilson_matches_known_values():
    # Agresti & Coull (1998)-style reference values, computed independently from the closed form.
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow, wide = wilson_interval(50, 100, 0.8), wilson_interval(50, 100, 0.99)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    with pytest.raises(ValueError):
        wilson_interval(1, 10, confidence=1.0)


def test_wilson_covers_the_pages_rate_about_95_percent_of_the_time():
    rng = random.Random(1)
    p, n, draws = 0.62, 160, 3000
    covered = 0
    for _ in range(draws):
        low, high = wilson_interval(sum(rng.random() < p for _ in range(n)), n)
        covered += low <= p <= high
    assert 0.93 <= covered / draws <= 0.97


@pytest.mark.parametrize("n", [20, 80])
def test_wilson_covers_about_95_percent_on_average_over_rates(n):
    # Coverage at one p oscillates with p and n (Brown, Cai & DasGupta 2001); averaged over p it is near nominal.
    rng = random.Random(n)
    draws, covered = 3000, 0
    for _ in range(draws):
        p = rng.uniform(0.05, 0.95)
        low, high = wilson_interval(sum(rng.random() < p for _ in range(n)), n)
        covered += low <= p <= high
    assert 0.93 <= covered / draws <= 0.97


def test_bootstrap_over_scenarios_covers_the_true_pass_at_k_roughly():
    # Each draw: 40 new scenarios with true pass rates p ~ U(0, 1), 8 samples each. The estimand is the mean
    # pass@2 over that population of scenarios, E[1 - (1 - p)^2] = 2/3.
    rng = random.Random(2)
    truth = 2 / 3
    draws, covered = 200, 0
    for draw in range(draws):
        rates = [rng.random() for _ in range(40)]
        per_scenario = [pass_at_k(8, sum(rng.random() < p for _ in range(8)), 2) for p in rates]
        low, high = bootstrap_interval(per_scenario, resamples=400, seed=draw)
        covered += low <= truth <= high
    # The percentile bootstrap runs a little narrow on 40 units; 200 draws put about +-3 points of noise on it.
    assert 0.88 <= covered / draws <= 0.99


def test_bootstrap_is_seeded_and_validates():
    values = [0.1, 0.5, 0.9, 1.0, 0.0, 0.7]
    assert bootstrap_interval(values, seed=3) == bootstrap_interval(values, seed=3)
    assert bootstrap_interval(values, seed=3) != bootstrap_interval(values, seed=4)
    low, high = bootstrap_interval(values, statistic=max, resamples=200)
    assert low <= high == 1.0
    assert all(math.isnan(x) for x in bootstrap_interval([]))
    with pytest.raises(ValueError):
        bootstrap_interval(values, resamples=0)


def test_score_reads_passed_or_reward_and_checks_k():
    scored = score(
        [{"scenario_id": "a", "passed": True}, {"scenario_id": "a", "reward": 0}, {"scenario_id": "b", "reward": 2}]
    )
    assert scored.counts == {"a": (2, 1), "b": (1, 1)} and scored.samples == 3 and scored.passes == 2
    with pytest.raises(ValueError, match=r"pass@2 needs at least 2 samples per scenario.*'b' has 1"):
        scored.pass_at(2)
    with pytest.raises(ValueError, match="scenario_id"):
        score([{"reward": 1}])
    with pytest.raises(ValueError, match="no rows"):
        score([]).pass_at(1)


def rank_by_tool_calls(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: g["completion"].count("<tool_call>"))
    return {"ranking": [g["index"] for g in passes], "hacks": []}


def test_score_with_a_judge_keeps_the_spread_report():
    rows = simulate("builtin:all", seeded_agent(seed=0), n=8, seed=0)[: 8 * 40]
    scored = score(rows, judge=rank_by_tool_calls)
    assert scored.spread is not None and scored.spread.verdict == "yes"
    assert "pass@1" in str(scored) and "spread: yes" in str(scored)
    ready = whileai.GroupwiseGrading(grader=rank_by_tool_calls)
    assert score(rows, judge=ready).spread.verdict == "yes"
    assert score(rows).spread is None
