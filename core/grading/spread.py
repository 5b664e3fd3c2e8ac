"""The spread gate: does a grader tell passes apart at all?

Group normalization subtracts each group's mean, so a grader that gives every pass the same score changes nothing
but the cost (the text-to-SQL null result of 2026-09-21). ``spread_report`` takes the grader's scores on a sample of
passes and returns the verdict with the page's two lines. It grades nothing itself: ``GroupwiseGrading.check_spread``
collects the scores.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from whileai.simulations.defaults import (
    SPREAD_MAX_NEAR_MEDIAN,
    SPREAD_MIN_SCORES,
    SPREAD_MIN_STD,
    SPREAD_TOLERANCE,
)

__all__ = ["SpreadReport", "spread_report"]

Verdict = Literal["yes", "no", "too few"]

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
        failed: groups whose grader answer was unusable, by reason.
        hacks: confirmed hacks, by group id.
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
        """How many groups fell back and why (empty when none did)."""
        if not self.failed:
            return ""
        reasons = ", ".join(f"{reason} x{count}" for reason, count in sorted(self.failed.items()))
        return f" {sum(self.failed.values())} group(s) fell back ({reasons})."

    @property
    def conclusion(self) -> str:
        """The second line: the verdict and, when it is not "yes", what to change."""
        if self.verdict == "yes":
            return "spread: yes. The grader tells these passes apart." + self.fell_back
        if self.verdict == "too few":
            if self.failed:
                return (
                    f"spread: too few scores to judge ({len(self.scores)}, at least {SPREAD_MIN_SCORES} needed)."
                    f"{self.fell_back} Fix the grader first: --json lists the reasons, --debug shows tracebacks."
                )
            return (
                f"spread: too few scores to judge ({len(self.scores)}, at least {SPREAD_MIN_SCORES} needed). "
                "Send more groups with at least two passes each."
            )
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
        return f"{self.summary}\n{self.conclusion}"

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
            "failed_groups": dict(self.failed),
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
) -> SpreadReport:
    """The verdict on a grader's scores, grouped by the group that produced them.

    No spread means ``std < min_std`` or more than ``max_near_median`` of the scores within ``tolerance`` of their
    median; fewer than two scores is ``"too few"``, never ``"yes"``.

    Example:
        >>> print(spread_report({"a": [1.0, 0.5], "b": [1.0, 0.5]}))
        spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75
        spread: yes. The grader tells these passes apart.
    """
    groups = {str(k): [float(s) for s in v] for k, v in per_group.items() if len(v)}
    scores = [s for v in groups.values() for s in v]
    if scores:
        std = statistics.pstdev(scores)
        median = statistics.median(scores)
        near = sum(abs(s - median) <= tolerance + _EDGE for s in scores) / len(scores)
    else:
        std = median = near = 0.0
    verdict: Verdict
    if len(scores) < SPREAD_MIN_SCORES:
        verdict = "too few"
    elif std < min_std or near > max_near_median:
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
    )
