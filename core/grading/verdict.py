"""The spread gate's verdict on a grader's scores: ``spread_report`` judges them, ``SpreadReport`` says it, with
the controls' figures (``whileai.grading.controls`` makes and measures the control groups;
``whileai.grading.controls_report`` holds what they found).

The verdicts:

- ``"yes"``: the scores vary, and the controls (when run) say the grader reads the rollouts, not their order;
- ``"no"``: the scores are flat, or the ranking follows position, or identical passes were told apart (exit 1);
- ``"too few"``: fewer than two scores to judge; in advantage mode, no group whose scores training would use (a
  failure beside two passes above the group's mean: equation 3 moves nothing in the others); or fewer than
  ``min_measured_controls`` of the control groups came back graded, so nothing says whether the grader reads content
  (exit 1);
- ``"broken"``: the grader failed (raised, timed out, answered nonsense) on ``broken_fraction`` of the groups or more
  (90% by default): that is a grader to fix, not a grader without spread, and the command line exits 4.

The report's sentences (``finding``, ``conclusion``) are the gate's and the spread watch's alike. No I/O: the gate
(``whileai.grading.gate``) grades, this module judges what came back.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from whileai.defaults import (
    SPREAD_MIN_SCORES,
)
from whileai.grading.knobs import SpreadThresholds

if TYPE_CHECKING:  # the controls' report is made where the controls are measured
    from whileai.grading.controls_report import ControlsReport

__all__ = ["SpreadReport", "Verdict", "spread_report"]

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
        verdict: ``"yes"``, ``"no"``, ``"too few"`` (fewer than two scores, or too few controls measured) or
            ``"broken"``.
        per_group: the scores of each group, by group id.
        mode: the grading mode that produced the scores.
        thresholds: the thresholds applied.
        skipped: groups not sent to the grader (fewer than two passes).
        unscorable: completions the verifier could not score (None, NaN, inf), left out of their groups: the
            verifier's doing, never counted as a grader failure.
        failed: groups whose grading fell back, by kind (the exception's type, a judge call's ``"http 429"``,
            ``"unusable answer"``, ``"grader timed out"``, ...).
        first_failures: the first reason of each kind, whole.
        hacks: confirmed hacks, by group id.
        attempted: groups sent to the grader.
        controls: the controls' figures, or None when they were not run.
        movable: graded groups whose scores training uses (advantage mode: a pass above the group's mean by the
            verifier, which training sends to the grader, and two or more once hacks count as failures; reward mode:
            every graded group), or None where not counted (the spread watch, whose groups training graded).
        emptied: graded groups whose confirmed hacks left fewer than two passes (no score to tell apart).
        moving: the scores of the ``movable`` groups (None where not counted): scores that vary only where training
            moves nothing are no spread either.
        grader: the grader as a message names it (a function of the user's by its name, file and line), or empty.
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
    thresholds: SpreadThresholds = field(default_factory=lambda: SpreadThresholds())
    skipped: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    hacks: dict[str, list[int]] = field(default_factory=dict)
    first_failures: dict[str, str] = field(default_factory=dict)
    attempted: int = 0
    controls: ControlsReport | None = None
    unscorable: int = 0
    movable: int | None = None
    emptied: int = 0
    moving: list[float] | None = None
    grader: str = ""
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
            f"{self.near_median:.0%} within {self.thresholds.tolerance:g} of the median {self.median:.2f}"
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
    def rule(self) -> str | None:
        """The rule the verdict rests on: "broken", "too few" (scores), "unmoved" (no group whose scores training
        uses), "controls" (too few measured, or they refuse), "std", "near median"; None for "yes"."""
        limits = self.thresholds
        if self.verdict in ("yes", "broken"):
            return None if self.verdict == "yes" else "broken"
        if self.verdict == "too few":
            if len(self.scores) < SPREAD_MIN_SCORES:
                return "too few"
            return "unmoved" if self.movable == 0 else "controls"
        if self.std < limits.min_std:
            return "std"
        if self.near_median > limits.max_near_median:
            return "near median"
        return "moved flat" if _flat(self.moving, limits) else "controls"

    @property
    def finding(self) -> str:
        """The verdict and the figure it rests on, one sentence without its full stop: the conclusion starts with it,
        and the spread watch says it for each check."""
        rule, limits = self.rule, self.thresholds
        if rule is None:
            return "spread: yes. The grader tells these passes apart"
        if rule == "broken":
            kinds = ", ".join(f"{kind} x{count}" for kind, count in sorted(self.failed.items()))
            first = next(iter(self.first_failures.values()), "")
            return (
                f"spread: broken. The grader{f' {self.grader}' if self.grader else ''} failed on "
                f"{sum(self.failed.values())} of {self.attempted} group(s) "
                f"({kinds}; first: {first})"
            )
        if rule == "too few":
            return f"spread: too few scores to judge ({len(self.scores)}, at least {SPREAD_MIN_SCORES} needed)"
        if rule == "unmoved":
            return (
                f"spread: too few groups for training to move: none of the {self.groups} graded group(s) has two "
                "passes above its mean beside a failure by the verifier; in advantage mode training grades only such "
                "groups, and equation 3 moves nothing in the others (an all-pass group's advantages stay 0, whatever "
                "the grader says)"
            )
        if rule == "controls":
            assert self.controls is not None
            if self.verdict == "too few":
                return f"spread: {self.controls.shortfall}"
            return f"spread: no. The scores vary, but {self.controls.why}"
        if rule == "moved flat":
            std, near = _spread(self.moving or [], limits.tolerance)
            return (
                f"spread: no. The scores vary over all {self.groups} group(s), but on the {self.movable} that training "
                f"moves (a failure beside two passes) their std is {std:.3f} and {near:.0%} lie within "
                f"{limits.tolerance:g} of their median"
            )
        if rule == "std":
            return f"spread: no. the scores' std {self.std:.3f} is below {limits.min_std:g}"
        return (
            f"spread: no. {self.near_median:.0%} of the scores lie within {limits.tolerance:g} of the median "
            f"(at most {limits.max_near_median:.0%} allowed)"
        )

    @property
    def conclusion(self) -> str:
        """The second line: the verdict and, when it is not "yes", what to change."""
        rule, finding = self.rule, self.finding
        if rule == "broken":
            return (
                f"{finding}, at least {self.thresholds.broken_fraction:.0%} is a broken grader, not a flat one. "
                "Fix the grader: --json lists the failures by kind, --debug shows the first traceback."
            )
        if rule == "too few":
            return f"{finding}.{self.fell_back} {self._short_of_scores}"
        if rule == "unmoved":
            return (
                f"{finding}.{self.fell_back} Grade rollouts of a policy whose groups mix passes and failures (a harder "
                "task, an earlier checkpoint, or the run's own sample: spread.sample), or use reward mode "
                "(grading.mode: reward, with rubrics), which scores the passes of all-pass groups."
            )
        if rule in ("std", "near median"):
            unmoved = (
                " Nor is any graded group one that training moves (a failure beside two passes): --json's "
                "movable_groups is 0."
                if self.movable == 0
                else ""
            )
            return f"{finding}, so group normalization would erase the grader.{self.fell_back} {self.advice}{unmoved}"
        if rule == "moved flat":
            return f"{finding}, so equation 3 would move almost nothing.{self.fell_back} {self.advice}"
        return f"{finding}.{self.fell_back}"

    @property
    def _short_of_scores(self) -> str:
        """Why fewer than two scores came back, from what was counted, and what to change."""
        causes = []
        if self.failed:
            causes.append("Fix the grader first: --json lists the reasons, --debug shows tracebacks.")
        if self.emptied:
            hacks = sum(len(v) for v in self.hacks.values())
            causes.append(
                f"The grader named {hacks} pass(es) hacks, which left {self.emptied} group(s) with fewer than two "
                "passes to tell apart (--json lists them under hacks): if they are not hacks, the grader's hack rule "
                "is what to fix."
            )
        if self.skipped:
            causes.append(
                f"{self.skipped} group(s) held fewer than two passes by the verifier and were not graded: send groups "
                "with two passes or more (a larger group, or rollouts of a policy that passes more often)."
            )
        return " ".join(causes) or "Send groups with two passes or more each."

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
            if self.controls.warning:
                text += f"\n{self.controls.warning}."
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
                "min_std": self.thresholds.min_std,
                "tolerance": self.thresholds.tolerance,
                "max_near_median": self.thresholds.max_near_median,
            },
            "mode": self.mode,
            "skipped_groups": self.skipped,
            "verifier_unscorable": self.unscorable,
            "attempted_groups": self.attempted,
            "failed_groups": dict(self.failed),
            "first_failures": dict(self.first_failures),
            "broken_fraction": self.thresholds.broken_fraction,
            "controls": None if self.controls is None else self.controls.as_dict(),
            "movable_groups": self.movable,
            "hack_emptied_groups": self.emptied,
            "hacks": {k: list(v) for k, v in self.hacks.items()},
            "per_group": {k: list(v) for k, v in self.per_group.items()},
            "summary": self.summary,
            "conclusion": self.conclusion,
        }


def spread_report(
    per_group: Mapping[str, Sequence[float]],
    *,
    thresholds: SpreadThresholds | None = None,
    mode: str = "advantage",
    skipped: int = 0,
    failed: Mapping[str, int] | None = None,
    hacks: Mapping[str, Sequence[int]] | None = None,
    attempted: int | None = None,
    first_failures: Mapping[str, str] | None = None,
    controls: ControlsReport | None = None,
    unscorable: int = 0,
    movable: int | None = None,
    emptied: int = 0,
    moving: Sequence[float] | None = None,
) -> SpreadReport:
    """The verdict on a grader's scores, grouped by the group that produced them.

    No spread means ``std < min_std`` or more than ``max_near_median`` of the scores within ``tolerance`` of their
    median (the ``thresholds``), or ``controls`` that refuse; fewer than two scores, ``movable`` 0 (no group whose
    scores training uses), or ``controls`` measured on too few groups, is ``"too few"``, never ``"yes"``;
    failures on ``broken_fraction`` of the ``attempted`` groups or more (``attempted`` defaults to the groups that
    gave scores plus the failed ones) is ``"broken"``.

    Example:
        >>> print(spread_report({"a": [1.0, 0.5], "b": [1.0, 0.5]}))
        spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75
        spread: yes. The grader tells these passes apart.
    """
    limits = thresholds if thresholds is not None else SpreadThresholds()
    groups = {str(k): [float(s) for s in v] for k, v in per_group.items() if len(v)}
    scores = [s for v in groups.values() for s in v]
    std, near = _spread(scores, limits.tolerance)
    median = statistics.median(scores) if scores else 0.0
    failures = sum((failed or {}).values())
    tried = attempted if attempted is not None else len(groups) + failures
    verdict: Verdict
    if failures and failures >= limits.broken_fraction * tried:
        verdict = "broken"
    elif len(scores) < SPREAD_MIN_SCORES:
        verdict = "too few"
    elif std < limits.min_std or near > limits.max_near_median or (controls is not None and controls.refuses):
        verdict = "no"
    elif movable == 0:
        verdict = "too few"  # scores that vary, on groups where training moves nothing
    elif _flat(moving, limits):
        verdict = "no"  # the scores vary, but not where training uses them
    elif controls is not None and not controls.enough:
        verdict = "too few"  # the controls that would say "yes" were not measured
    else:
        verdict = "yes"
    report = SpreadReport(
        scores=scores,
        groups=len(groups),
        std=std,
        median=median,
        near_median=near,
        verdict=verdict,
        per_group=groups,
        mode=mode,
        thresholds=limits,
        skipped=skipped,
        failed=dict(failed or {}),
        hacks={str(k): list(v) for k, v in (hacks or {}).items()},
        first_failures=dict(first_failures or {}),
        attempted=tried,
        controls=controls,
        unscorable=unscorable,
        movable=movable,
        emptied=emptied,
        moving=None if moving is None else [float(m) for m in moving],
    )
    return report


def _flat(moving: Sequence[float] | None, limits: SpreadThresholds) -> bool:
    """Whether the scores training uses (two or more of them) are no spread by the thresholds."""
    if moving is None or len(moving) < SPREAD_MIN_SCORES:
        return False
    std, near = _spread(moving, limits.tolerance)
    return std < limits.min_std or near > limits.max_near_median


def _spread(scores: Sequence[float], tolerance: float) -> tuple[float, float]:
    """The scores' population std and their share within ``tolerance`` of their median (0, 0 without scores)."""
    if not scores:
        return 0.0, 0.0
    median = statistics.median(scores)
    return statistics.pstdev(scores), sum(abs(s - median) <= tolerance + _EDGE for s in scores) / len(scores)
