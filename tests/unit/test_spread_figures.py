"""The spread report's figures are the ``statistics`` module's: std, median and the fraction near the median."""

from __future__ import annotations

import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from whileai.grading.knobs import SpreadThresholds
from whileai.grading.verdict import spread_report

TOLERANCE = 0.05


def expected(scores: list[float]) -> tuple[float, float, float]:
    """std, median and near-median fraction, computed here from their definitions."""
    median = statistics.median(scores)
    near = sum(abs(s - median) <= TOLERANCE + 1e-12 for s in scores) / len(scores)
    return statistics.pstdev(scores), median, near


def figures(scores: list[float]) -> tuple[float, float, float]:
    report = spread_report({"g": scores}, thresholds=SpreadThresholds(tolerance=TOLERANCE))
    return report.std, report.median, report.near_median


finite = st.floats(allow_nan=False, allow_infinity=False)
# A grader's scores repeat: rank factors, rubric levels. Draw a few values, then many scores among them.
repeated = st.lists(
    st.one_of(finite, st.sampled_from([1.0, 0.5, 0.75, 1 / 3, 2 / 3, 0.1])), min_size=1, max_size=6
).flatmap(lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=60))


@given(repeated)
@settings(max_examples=400, deadline=None)
def test_figures_equal_the_statistics_module(scores: list[float]) -> None:
    assert figures(scores) == expected(scores)


def outcome(compute, scores: list[float]) -> list[str]:
    """The figures as text (NaN equals NaN, -0.0 differs from 0.0), or the exception's type: Python 3.11's pstdev
    raises AttributeError on an infinity, and the report does what it does."""
    try:
        return [str(f) for f in compute(scores)]
    except Exception as err:
        return [type(err).__name__]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_any_floats_give_the_statistics_modules_figures(scores: list[float]) -> None:
    assert outcome(figures, scores) == outcome(expected, scores)


def test_negative_zero_and_zero_keep_their_order() -> None:
    for scores in ([-0.0, 0.0], [0.0, -0.0], [-0.0, 0.0, 1.0, -0.0]):
        assert outcome(figures, scores) == outcome(expected, scores)


def test_rank_factors_of_many_groups() -> None:
    per_group = {f"g{i}": [1.0, 0.75, 0.5, 0.25][: 2 + i % 3] for i in range(1000)}
    report = spread_report(per_group)
    scores = [s for v in per_group.values() for s in v]
    assert (report.std, report.median, report.near_median) == expected(scores)
    assert report.verdict == "yes"
