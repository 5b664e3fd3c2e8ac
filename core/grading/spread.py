"""The spread gate: does a grader tell passes apart at all?

Group normalization subtracts each group's mean, so a grader that gives every pass the same score changes nothing
but the cost (the text-to-SQL null result of 2026-09-21). ``spread_report`` takes the grader's scores on a sample of
passes and returns the verdict with the page's two lines. It grades nothing itself: ``GroupwiseGrading.check_spread``
collects the scores.

The verdicts:

- ``"yes"``: the scores vary, and the controls (when run: ``whileai.grading.controls``) say the grader reads the
  rollouts, not their order;
- ``"no"``: the scores are flat, or the ranking follows position, or identical passes were told apart (exit 1);
- ``"too few"``: fewer than two scores to judge (exit 1);
- ``"broken"``: the grader failed (raised, timed out, answered nonsense) on ``broken_fraction`` of the groups or more
  (90% by default): that is a grader to fix, not a grader without spread, and the command line exits 4.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from whileai.defaults import (
    SPREAD_BROKEN_FRACTION,
    SPREAD_MAX_NEAR_MEDIAN,
    SPREAD_MIN_SCORES,
    SPREAD_MIN_STD,
    SPREAD_TOLERANCE,
)
from whileai.grading.controls import ControlsReport

__all__ = ["SpreadReport", "spread_report"]

Verdict = Literal["yes", "no", "too few", "broken"]

# Float noise must not push a score that sits exactly on the tolerance out of it.
_EDGE = 1e-12


@dataclass
class SpreadReport:
    """The grader's scores on a sample of passes and the verdict on their spread.

    Attributes:
        scores: every score, in group order (quality factors in advantage mode, S_sol * S_beh in reward mode).
        groups: groups that produced scores.
        std: population standard deviation of the scores.
        median: median of the scores.
        near_median: fraction of the scores within ``tolerance`` of the median.
        verdict: ``"yes"``, ``"no"`` or ``"too few"`` (fewer than two scores).
        per_group: the scores of each group, by group id.
        mode: the grading mode that produced the scores.
        min_std, tolerance, max_near_median: the thresholds applied.
        skipped: groups not sent to the grader (fewer than two passes).
        unscorable: completions the verifier could not score (None, NaN, inf), left out of their groups: the
            verifier's doing, never counted as a grader failure.
        failed: groups whose grading fell back, by kind (the exception's type, a judge call's ``"http 429"``,
            ``"unusable answer"``, ``"grader timed out"``, ...).
        first_failures: the first reason of each kind, whole.
        hacks: confirmed hacks, by group id.
        attempted: groups sent to the grader.
        broken_fraction: the share of ``attempted`` that must fail for the verdict ``"broken"``.
        controls: the controls' figures, or None when they were not run.
        first_error: the first exception behind a failure (for ``--debug``; not serialized).
    """

    scores: list[float]
    groups: int
    std: float
    median: float
    near_median: float
    verdict: Verdict
    per_group: dict[str, list[float]] = field(default_factory=dict)
    mode: str = "advantage"
    min_std: float = SPREAD_MIN_STD
    tolerance: float = SPREAD_TOLERANCE
    max_near_median: float = SPREAD_MAX_NEAR_MEDIAN
    skipped: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    hacks: dict[str, list[int]] = field(default_factory=dict)
    first_failures: dict[str, str] = field(default_factory=dict)
    attempted: int = 0
    broken_fraction: float = SPREAD_BROKEN_FRACTION
    controls: ControlsReport | None = None
    unscorable: int = 0
    first_error: BaseException | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True only for a "yes" verdict."""
        return self.verdict == "yes"

    @property
    def summary(self) -> str:
        """The first line: how many scores, their std and how many sit at the median."""
        return (
            f"spread check: {len(self.scores)} grader scores over {self.groups} group(s), std {self.std:.3f}, "
            f"{self.near_median:.0%} within {self.tolerance:g} of the median {self.median:.2f}"
        )

    @property
    def fell_back(self) -> str:
        """How many groups fell back and why, and how many completions the verifier could not score (empty when
        neither happened)."""
        text = ""
        if self.failed:
            reasons = ", ".join(f"{reason} x{count}" for reason, count in sorted(self.failed.items()))
            text = f" {sum(self.failed.values())} group(s) fell back ({reasons})."
        if self.unscorable:
            text += (
                f" {self.unscorable} completion(s) the verifier could not score (None, NaN or inf) were left out of "
                "their groups."
            )
        return text

    @property
    def conclusion(self) -> str:
        """The second line: the verdict and, when it is not "yes", what to change."""
        if self.verdict == "yes":
            return "spread: yes. The grader tells these passes apart." + self.fell_back
        if self.verdict == "broken":
            kinds = ", ".join(f"{kind} x{count}" for kind, count in sorted(self.failed.items()))
            first = next(iter(self.first_failures.values()), "")
            return (
                f"spread: unknown. The grader failed on {sum(self.failed.values())} of {self.attempted} group(s) "
                f"({kinds}; first: {first}), at least {self.broken_fraction:.0%} is a broken grader, not a flat one. "
                "Fix the grader: --json lists the failures by kind, --debug shows the first traceback."
            )
        if self.verdict == "too few":
            if self.failed:
                return (
                    f"spread: too few scores to judge ({len(self.scores)}, at least {SPREAD_MIN_SCORES} needed)."
                    f"{self.fell_back} Fix the grader first: --json lists the reasons, --debug shows tracebacks."
                )
            return (
                f"spread: too few scores to judge ({len(self.scores)}, at least {SPREAD_MIN_SCORES} needed)."
                f"{self.fell_back} Send more groups with at least two passes each."
            )
        if self.std >= self.min_std and self.near_median <= self.max_near_median and self.controls is not None:
            return f"spread: no. The scores vary, but {self.controls.why}.{self.fell_back}"
        if self.std < self.min_std:
            why = f"the scores' std {self.std:.3f} is below {self.min_std:g}"
        else:
            why = (
                f"{self.near_median:.0%} of the scores lie within {self.tolerance:g} of the median "
                f"(at most {self.max_near_median:.0%} allowed)"
            )
        return f"spread: no. {why}, so group normalization would erase the grader.{self.fell_back} {self.advice}"

    @property
    def advice(self) -> str:
        """What to change when the grader shows no spread."""
        floor = " or lower the reward-mode floor, which flattens low scores" if self.mode == "reward" else ""
        return (
            "Grade more or different groups, move to multi-turn tasks where passes differ (an extra tool call, a "
            f"skipped verification, an invented id), or use a finer grader or rubric{floor}."
        )

    def __str__(self) -> str:
        text = f"{self.summary}\n{self.conclusion}"
        if self.controls is not None and self.verdict != "broken":
            text += f"\n{self.controls.line}"
        return text

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "verdict": self.verdict,
            "scores": len(self.scores),
            "groups": self.groups,
            "std": self.std,
            "median": self.median,
            "near_median": self.near_median,
            "thresholds": {
                "min_std": self.min_std,
                "tolerance": self.tolerance,
                "max_near_median": self.max_near_median,
            },
            "mode": self.mode,
            "skipped_groups": self.skipped,
            "verifier_unscorable": self.unscorable,
            "attempted_groups": self.attempted,
            "failed_groups": dict(self.failed),
            "first_failures": dict(self.first_failures),
            "broken_fraction": self.broken_fraction,
            "controls": None if self.controls is None else self.controls.as_dict(),
            "hacks": {k: list(v) for k, v in self.hacks.items()},
            "per_group": {k: list(v) for k, v in self.per_group.items()},
            "summary": self.summary,
            "conclusion": self.conclusion,
        }


def spread_report(
    per_group: Mapping[str, Sequence[float]],
    *,
    min_std: float = SPREAD_MIN_STD,
    tolerance: float = SPREAD_TOLERANCE,
    max_near_median: float = SPREAD_MAX_NEAR_MEDIAN,
    mode: str = "advantage",
    skipped: int = 0,
    failed: Mapping[str, int] | None = None,
    hacks: Mapping[str, Sequence[int]] | None = None,
    attempted: int | None = None,
    broken_fraction: float = SPREAD_BROKEN_FRACTION,
    first_failures: Mapping[str, str] | None = None,
    controls: ControlsReport | None = None,
    unscorable: int = 0,
) -> SpreadReport:
    """The verdict on a grader's scores, grouped by the group that produced them.

    No spread means ``std < min_std`` or more than ``max_near_median`` of the scores within ``tolerance`` of their
    median, or ``controls`` that fail; fewer than two scores is ``"too few"``, never ``"yes"``; failures on
    ``broken_fraction`` of the ``attempted`` groups or more (``attempted`` defaults to the groups that gave scores
    plus the failed ones) is ``"broken"``.

    Example:
        >>> print(spread_report({"a": [1.0, 0.5], "b": [1.0, 0.5]}))
        spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75
        spread: yes. The grader tells these passes apart.
    """
    groups = {str(k): [float(s) for s in v] for k, v in per_group.items() if len(v)}
    scores = [s for v in groups.values() for s in v]
    std, median, near = _figures(scores, tolerance) if scores else (0.0, 0.0, 0.0)
    failures = sum((failed or {}).values())
    tried = attempted if attempted is not None else len(groups) + failures
    verdict: Verdict
    if failures and failures >= broken_fraction * tried:
        verdict = "broken"
    elif len(scores) < SPREAD_MIN_SCORES:
        verdict = "too few"
    elif std < min_std or near > max_near_median or (controls is not None and not controls.ok):
        verdict = "no"
    else:
        verdict = "yes"
    return SpreadReport(
        scores=scores,
        groups=len(groups),
        std=std,
        median=median,
        near_median=near,
        verdict=verdict,
        per_group=groups,
        mode=mode,
        min_std=min_std,
        tolerance=tolerance,
        max_near_median=max_near_median,
        skipped=skipped,
        failed=dict(failed or {}),
        hacks={str(k): list(v) for k, v in (hacks or {}).items()},
        first_failures=dict(first_failures or {}),
        attempted=tried,
        broken_fraction=broken_fraction,
        controls=controls,
        unscorable=unscorable,
    )


def _figures(scores: list[float], tolerance: float) -> tuple[float, float, float]:
    """``statistics.pstdev(scores)``, ``statistics.median(scores)`` and the fraction of the scores within
    ``tolerance`` of the median, to the last bit, from the distinct scores and their counts.

    A grader gives few distinct scores (rank factors, rubric levels), so counting them first spares the exact
    fraction arithmetic ``pstdev`` does on every score, most of the time these figures took. Scores with a zero, a
    NaN or an infinity take the ``statistics`` functions themselves (a zero: -0.0 and 0.0 would count as one).
    """
    counts = Counter(scores)
    if 0.0 in counts or not all(math.isfinite(value) for value in counts):
        median = statistics.median(scores)
        near = sum(abs(s - median) <= tolerance + _EDGE for s in scores)
        return statistics.pstdev(scores), median, near / len(scores)
    n = len(scores)
    ordered = sorted(counts.items())
    # pstdev: the exact mean square deviation (n * sum(x^2) - sum(x)^2) / n^2, then its correctly rounded root.
    sx = sum(Fraction(value) * count for value, count in ordered)
    sxx = sum(Fraction(value) ** 2 * count for value, count in ordered)
    mss = (n * sxx - sx * sx) / (n * n)
    std = _float_sqrt(mss.numerator, mss.denominator)
    # median: the middle score, or the mean of the two middle scores, as statistics.median takes them.
    middle = [_nth(ordered, n // 2)] if n % 2 else [_nth(ordered, n // 2 - 1), _nth(ordered, n // 2)]
    median = middle[0] if n % 2 else (middle[0] + middle[1]) / 2
    near = sum(count for value, count in ordered if abs(value - median) <= tolerance + _EDGE)
    return std, median, near / n


def _nth(ordered: list[tuple[float, int]], position: int) -> float:
    """The score at ``position`` (from 0) of the sorted scores, given as sorted (score, count) pairs."""
    for value, count in ordered:
        if position < count:
            return value
        position -= count
    raise IndexError(position)


def _float_sqrt(numerator: int, denominator: int) -> float:
    """The square root of ``numerator / denominator`` rounded to the nearest float, as ``statistics.pstdev`` rounds
    it: an integer root on 2 * 53 + 3 bits rounded to odd, then one correctly rounded division
    (https://bugs.python.org/msg407078)."""
    shift = (numerator.bit_length() - denominator.bit_length() - 109) // 2
    if shift >= 0:
        return float(_root_to_odd(numerator, denominator << 2 * shift) << shift)
    return _root_to_odd(numerator << -2 * shift, denominator) / (1 << -shift)


def _root_to_odd(numerator: int, denominator: int) -> int:
    """The integer square root of ``numerator / denominator``, rounded to odd."""
    root = math.isqrt(numerator // denominator)
    return root | (root * root * denominator != numerator)
