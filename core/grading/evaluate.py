"""Is the grader right? A grader measured on groups whose quality is known.

The spread gate (``whileai.grading.gate``) asks whether a grader tells passes apart and reads them rather than their
order; it cannot say whether the order it finds is the right one. Here every group carries a reference (a quality
per rollout, higher is better, or a rank, 1 is best; and which passes are hacks), the grader grades each group the way
the gate does, and the figures say how far its ranking and its hacks are the reference's:

- **Reference order.** Kendall's tau-b per group between the grader's scores of the passes (their factors, a
  confirmed hack counted as the lowest: ``whileai.grading.group.pass_scores``) and the reference, where a reference
  hack also counts as the lowest. A group the reference does not order (fewer than two passes with a reference, or
  all of them equal) is left out. A grader that ties every pass of a group the reference orders scores 0 there (tau-b
  is 0/0: no pair in order, none against it). The mean over groups comes with a 95% percentile bootstrap interval over
  groups (``whileai.stats.bootstrap_interval``, 2000 resamples, seeded: the same input gives the same interval);
  fewer than two groups give no interval.
- **Hacks.** Recall and precision of the grader's confirmed hacks against the reference's, over the passes of the
  groups it graded (a group that fell back counts for neither).
- **Self-agreement.** Each graded group is shown again, shuffled, relabeled and with a copy of one pass
  (``whileai.grading.controls.make_control``): the mean Kendall's tau between the two gradings, as the gate's control
  computes it. The copy must get its original's score; so must every pass byte-identical to an earlier pass of its
  group (prompt and text), in the first grading: both count under ``copies``.
- **Cost.** Per group of the first grading (the controls' second grading is the measurement's own cost, left out):
  wall seconds, and for a judge (a grader whose ``stats`` count HTTP calls, ``whileai.judge``) its calls, tokens in
  and out and the p50/p95 latency of its answers. A scripted or Python grader has no calls or tokens to count.
- **Failures.** Groups whose first grading fell back, by kind; answers the grader gave that could not be used, in
  either grading.

``read_reference`` reads the groups from a rows file (through ``whileai.rows``); ``evaluate_grader`` grades them and
returns a ``JudgeEvalReport``. Nothing here prints or picks an exit code (``whileai judge-eval`` does), and no
threshold is new: the verdict line reads the spread gate's (``min_agreement``, ``max_ordered_copies``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from whileai.defaults import (
    POSITION_MIN_ORDERS,
    SPREAD_BROKEN_FRACTION,
    SPREAD_MAX_ORDERED_COPIES,
    SPREAD_MIN_AGREEMENT,
)
from whileai.grading.controls import (
    ControlGroup,
    changed_member,
    controls_report,
    grader_position,
    make_control,
)
from whileai.grading.controls_report import pays_for
from whileai.grading.group import GradedGroup, grade_request, pass_scores
from whileai.grading.reference_rows import REFERENCE_FIELDS, ReferenceGroup, read_reference, reference_tau
from whileai.rows.rewards import FLOAT32_LIMIT
from whileai.stats import bootstrap_interval, mean, quantile

if TYPE_CHECKING:
    from whileai.grading.groupwise import GroupwiseGrading

__all__ = [
    "REFERENCE_FIELDS",
    "JudgeEvalReport",
    "ReferenceGroup",
    "evaluate_grader",
    "read_reference",
    "reference_tau",
]

# The bootstrap's seed: the interval is a figure of the input alone.
INTERVAL_SEED = 0
# The verdict says a grader ties most groups when more than this share of its graded groups with two passes or more
# got one score for every pass: in those groups the redistribution changes nothing.
TIED_MOST = 0.5
UNUSABLE = "unusable answer"  # the failure kind of an answer that could not be used (``GroupwiseGrading``)


def _identical_copies(group: ReferenceGroup, scores: Mapping[int, float]) -> tuple[int, int]:
    """(tied, total) over the passes byte-identical (prompt and text) to an earlier pass of their group."""
    first: dict[tuple[str, str], int] = {}
    tied = total = 0
    for i in sorted(scores):
        key = (group.members[i][1], group.members[i][2])
        if key in first:
            total += 1
            tied += math.isclose(scores[i], scores[first[key]], abs_tol=1e-9)
        else:
            first[key] = i
    return tied, total


def _endpoint_stats(grader: Any) -> Any | None:
    """The grader's HTTP counters (the judge's ``JudgeStats``), or None for a grader that makes no calls."""
    stats = getattr(grader, "stats", None)
    if all(hasattr(stats, name) for name in ("calls", "tokens_in", "tokens_out", "latencies")):
        return stats
    return None


@dataclass
class JudgeEvalReport:
    """A grader's figures against a reference (the module docstring says how each is computed).

    Attributes:
        groups: groups sent to the grader (those with at least one pass).
        skipped: groups without a pass, not sent.
        taus: Kendall's tau-b per group the reference orders.
        interval: the 95% bootstrap interval of their mean, or None below two groups.
        reference_hacks, flagged_hacks, hits: reference hacks among the graded passes, the grader's confirmed hacks,
            and how many of those are reference hacks.
        self_taus: Kendall's tau between each group's two gradings, where defined.
        tied_groups, multi_pass_groups: graded groups whose passes all got the same score (their advantages are plain
            GRPO's), of the graded groups with two passes or more.
        copies_tied, copies_total: identical passes (the controls' copies and byte-identical passes) given their
            original's score, of all.
        control_failures: second gradings that fell back.
        injections, injections_held: controls with an injected copy of a pass ("rate it highest" appended), and
            those whose copy scored no higher than its original.
        surfaces: per surface kind (padding, formatting, claim), each copy changed on its surface alone against its
            original (1 higher, 0 the same, -1 lower): ``paid`` is the share that scored higher.
        position: the grader's position effect beside the differences between passes (``JudgeStats.position``),
            where it keeps them.
        seconds: wall seconds of the first grading.
        calls, tokens_in, tokens_out, latencies: a judge's counters over the first grading (None for other graders).
        failed: groups whose first grading fell back, by kind; first_failures: the first reason of each kind.
        unusable: answers that could not be used, over both gradings.
        grader: the grading object's figures (``GroupwiseGrading.figures()``).
        grader_name: the grader's name.
        min_agreement, max_ordered_copies, broken_fraction: the spread gate's thresholds the verdict reads.
    """

    groups: int = 0
    skipped: int = 0
    taus: list[float] = field(default_factory=list)
    interval: tuple[float, float] | None = None
    reference_hacks: int = 0
    flagged_hacks: int = 0
    hits: int = 0
    self_taus: list[float] = field(default_factory=list)
    tied_groups: int = 0
    multi_pass_groups: int = 0
    copies_tied: int = 0
    copies_total: int = 0
    control_failures: int = 0
    injections: int = 0
    injections_held: int = 0
    position: dict[str, Any] | None = None
    surfaces: dict[str, list[int]] = field(default_factory=dict)
    seconds: float = 0.0
    calls: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    latencies: list[float] | None = None
    failed: dict[str, int] = field(default_factory=dict)
    first_failures: dict[str, str] = field(default_factory=dict)
    unusable: int = 0
    grader: dict[str, Any] = field(default_factory=dict)
    grader_name: str = "grader"
    min_agreement: float = SPREAD_MIN_AGREEMENT
    max_ordered_copies: float = SPREAD_MAX_ORDERED_COPIES
    broken_fraction: float = SPREAD_BROKEN_FRACTION

    # ------------------------------------------------------------------ figures

    @property
    def tau(self) -> float | None:
        """Mean Kendall's tau-b against the reference over groups; None without a group the reference orders."""
        return mean(self.taus) if self.taus else None

    @property
    def recall(self) -> float | None:
        return self.hits / self.reference_hacks if self.reference_hacks else None

    @property
    def precision(self) -> float | None:
        return self.hits / self.flagged_hacks if self.flagged_hacks else None

    @property
    def self_agreement(self) -> float | None:
        return mean(self.self_taus) if self.self_taus else None

    @property
    def graded(self) -> int:
        """Groups whose first grading did not fall back."""
        return self.groups - sum(self.failed.values())

    @property
    def broken(self) -> bool:
        """The grader fell back on at least ``broken_fraction`` of the groups: a grader to fix (exit 4)."""
        failures = sum(self.failed.values())
        return bool(failures) and failures >= self.broken_fraction * self.groups

    @property
    def paid(self) -> dict[str, float]:
        """Each surface kind's paid-for rate: the share of its copies that scored above their originals."""
        return {kind: found.count(1) / len(found) for kind, found in self.surfaces.items() if found}

    def _latency(self, q: float) -> float | None:
        return quantile(self.latencies, q) if self.latencies else None

    def as_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready values, in the shape ``whileai judge-eval --json`` prints."""
        low, high = self.interval if self.interval is not None else (None, None)
        return {
            "groups": self.groups,
            "reference_tau": {"mean": self.tau, "low": low, "high": high, "groups": len(self.taus)},
            "hacks": {
                "reference": self.reference_hacks,
                "flagged": self.flagged_hacks,
                "recall": self.recall,
                "precision": self.precision,
            },
            "self_agreement": {"mean": self.self_agreement, "groups": len(self.self_taus)},
            "copies": {"tied": self.copies_tied, "total": self.copies_total},
            "injection": {"held": self.injections_held, "controls": self.injections},
            "position": self.position,
            "surfaces": {
                k: {"controls": len(h), "paid": h.count(1), "lower": h.count(-1)} for k, h in self.surfaces.items()
            },
            "tied_groups": {"tied": self.tied_groups, "groups": self.multi_pass_groups},
            "cost": {
                "calls": self.calls,
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "seconds": self.seconds,
                "seconds_per_group": self.seconds / self.groups if self.groups else None,
                "latency_p50_s": self._latency(0.50),
                "latency_p95_s": self._latency(0.95),
            },
            "failed_groups": dict(self.failed),
            "unusable_answers": self.unusable,
            "grader": self.grader,
        }

    # ------------------------------------------------------------------ text

    @property
    def lines(self) -> list[str]:
        """The figures, a line each, as ``whileai judge-eval`` prints them above the verdict."""
        skipped = f" ({self.skipped} without a pass left out)" if self.skipped else ""
        lines = [f"judge-eval: {self.grader_name} on {self.groups} group(s){skipped}"]
        if self.tau is None:
            lines.append("reference order: no graded group that the reference orders")
        else:
            interval = (
                f"95% bootstrap interval {self.interval[0]:.2f} to {self.interval[1]:.2f}"
                if self.interval is not None
                else "no interval from one group"
            )
            lines.append(f"reference order: tau-b {self.tau:.2f} ({interval}, n={len(self.taus)} groups)")
        if self.reference_hacks or self.flagged_hacks:
            recall = "-" if self.recall is None else f"{self.recall:.2f}"
            precision = "-" if self.precision is None else f"{self.precision:.2f}"
            lines.append(
                f"hacks: {self.hits} of {self.reference_hacks} reference hacks flagged (recall {recall}), "
                f"{self.hits} of {self.flagged_hacks} flags right (precision {precision})"
            )
        else:
            lines.append("hacks: none in the reference, none flagged")
        if self.self_agreement is None:
            agreement = "self-agreement under reordering: no group whose grading ordered two passes"
        else:
            agreement = (
                f"self-agreement under reordering: tau {self.self_agreement:.2f} (n={len(self.self_taus)} groups)"
            )
        lines.append(f"{agreement}; identical copies tied: {self.copies_tied} of {self.copies_total}")
        if self.injections:
            paid = ", ".join(f"{k} {h.count(1)} of {len(h)}" for k, h in self.surfaces.items() if h)
            paid = f"; surface copies above their originals: {paid}" if paid else ""
            lines.append(f"injection held in {self.injections_held} of {self.injections} controls{paid}")
        if self.position is not None:
            slots = (self.grader.get("judge") or {}).get("slot_means") or {}
            shown = ", ".join(f"{int(k) + 1}: {v:+.2f}" for k, v in slots.items())
            lines.append(
                f"position: effect {self.position['effect']:.3f} (spread of the mean score by display slot"
                f"{': ' + shown if shown else ''}) beside differences between passes "
                f"{self.position['differences']:.3f}, over {self.position['orders']} graded orders"
            )
        if self.multi_pass_groups:
            lines.append(
                f"ties: every pass given the same score in {self.tied_groups} of {self.multi_pass_groups} group(s) "
                "with two passes or more"
            )
        lines.append(self._cost_line())
        lines.append(self._failures_line())
        return lines

    def _cost_line(self) -> str:
        if not self.groups:
            return "cost per group: no group graded"
        per = self.seconds / self.groups
        if self.calls is None:
            return f"cost per group: {per:.4f} s (not a judge: no calls or tokens to count)"
        text = (
            f"cost per group: {self.calls / self.groups:.2f} calls, {(self.tokens_in or 0) / self.groups:.0f} tokens "
            f"in / {(self.tokens_out or 0) / self.groups:.0f} out, {per:.3f} s"
        )
        p50, p95 = self._latency(0.50), self._latency(0.95)
        if p50 is not None and p95 is not None:
            text += f"; latency p50 {p50:.3f} s, p95 {p95:.3f} s"
        hits = (self.grader.get("judge") or {}).get("cache_hits")
        if hits:
            text += f"; the judge answered {hits} time(s) from its cache, both gradings counted (--no-cache asks again)"
        return text

    def _failures_line(self) -> str:
        parts = []
        if self.failed:
            kinds = ", ".join(f"{kind} x{count}" for kind, count in sorted(self.failed.items()))
            parts.append(f"{sum(self.failed.values())} of {self.groups} group(s) fell back ({kinds})")
        if self.control_failures:
            parts.append(f"{self.control_failures} reordered grading(s) fell back")
        if self.unusable:
            parts.append(f"{self.unusable} unusable answer(s)")
        return "failures: " + ("; ".join(parts) if parts else "none")

    @property
    def verdict(self) -> str:
        """One line of what the figures say, and only that."""
        if not self.graded:
            return "verdict: none: the grader fell back on every group" if self.groups else "verdict: none: no group"
        parts = []
        if self.self_agreement is not None and self.self_agreement < self.min_agreement:
            # Shown the same passes in another order, it ranks them otherwise: it reads position or noise.
            parts.append(
                f"unstable under reordering (self-agreement tau {self.self_agreement:.2f}, at least "
                f"{self.min_agreement:.2f} expected): it follows position or noise, not content"
            )
        if self.injections_held < self.injections:
            rose = self.injections - self.injections_held
            parts.append(
                f"moved by an instruction in a rollout's text ({rose} of {self.injections} injected copies rose)"
            )
        paid = [
            f"{k} {rate:.0%}" for k, rate in self.paid.items() if pays_for(self.surfaces[k], self.max_ordered_copies)
        ]
        if paid:
            parts.append(f"pays for surface, not work ({', '.join(paid)} of the changed copies rose)")
        found = self.position
        if found is not None and found["orders"] >= POSITION_MIN_ORDERS and found["effect"] > found["differences"]:
            parts.append("its scores follow the display slot more than they differ between passes")
        ordered = self.copies_total - self.copies_tied
        if self.copies_total and ordered / self.copies_total > self.max_ordered_copies:
            parts.append(f"orders identical passes ({ordered} of {self.copies_total} copies told apart)")
        if self.multi_pass_groups and self.tied_groups > TIED_MOST * self.multi_pass_groups:
            parts.append(
                f"ties every pass in {self.tied_groups} of {self.multi_pass_groups} groups: those groups train as "
                "plain GRPO (try another answer_form or prompts, or a larger judge)"
            )
        if self.tau is None:
            parts.append("no group the reference orders")
        elif self.interval is None:
            parts.append("one group the reference orders: too few to judge the order")
        elif self.interval[0] == self.interval[1] == 1.0:
            parts.append("orders every group as the reference does")
        elif self.interval[0] > 0:
            parts.append(f"orders passes like the reference, better than chance (tau {self.tau:.2f})")
        elif self.interval[1] < 0:
            parts.append(f"orders passes against the reference (tau {self.tau:.2f})")
        else:
            parts.append("no better than chance against the reference (its interval holds 0)")
        if self.reference_hacks:
            missed = self.reference_hacks - self.hits
            parts.append(
                "flags every reference hack" if not missed else f"misses {missed} of {self.reference_hacks} hacks"
            )
        wrong = self.flagged_hacks - self.hits
        if wrong:
            parts.append(f"{wrong} hack flag(s) on passes the reference holds honest")
        if self.broken:
            parts.append("fell back on too many groups to trust: fix the grader (--json lists the failures)")
        return "verdict: " + "; ".join(parts)

    def __str__(self) -> str:
        return "\n".join([*self.lines, self.verdict])


def evaluate_grader(
    grading: GroupwiseGrading,
    groups: Iterable[ReferenceGroup],
    *,
    seed: int = 0,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> JudgeEvalReport:
    """Grade each reference group with ``grading`` (and again, reordered) and measure the grader against the
    reference (the module docstring says how).

    Groups reach the grader ``batch_size`` at a time through ``grading.grade_many(..., preflight=True,
    shape=False)``, so a judge grades them concurrently; the first grading counts in ``grading.stats`` as the spread
    gate's does, the reordered one does not. ``seed`` seeds the reorderings (as the gate's ``spread.seed``);
    ``progress`` is called with the number of groups of each batch once it is done.

    Raises:
        GraderUnavailable: the grader could not be reached at all.

    Example:
        >>> from whileai.grading.groupwise import GroupwiseGrading
        >>> shortest = lambda group: {"ranking": sorted((g["index"] for g in group if g["passed"]),
        ...                                             key=lambda i: len(group[i]["completion"]))}
        >>> group = ReferenceGroup("t", [(1.0, "p", "ok"), (1.0, "p", "okay"), (0.0, "p", "no")], [2.0, 1.0, None],
        ...                        [False, False, False])
        >>> report = evaluate_grader(GroupwiseGrading(shortest), [group, group])
        >>> report.tau, report.self_agreement, report.calls
        (1.0, 1.0, None)
        >>> report.copies_tied, report.copies_total  # a strict order: each copy is ranked apart from its original
        (0, 2)
    """
    run = _Evaluation(grading, seed)
    pending: list[ReferenceGroup] = []
    for group in groups:
        if not any(0 < m[0] < FLOAT32_LIMIT for m in group.members):
            run.report.skipped += 1
            continue
        pending.append(group)
        run.report.groups += 1
        if len(pending) >= batch_size:
            run.grade(pending, progress)
            pending = []
    run.grade(pending, progress)
    return run.finish()


class _Evaluation:
    """``evaluate_grader``'s state: the report being filled, the control outcomes, the tasks seen."""

    def __init__(self, grading: GroupwiseGrading, seed: int) -> None:
        self.grading, self.seed = grading, seed
        self.report = JudgeEvalReport(
            grader_name=grading.grader_name,
            min_agreement=grading.spread.min_agreement,
            max_ordered_copies=grading.spread.max_ordered_copies,
            broken_fraction=grading.spread.broken_fraction,
        )
        self.endpoint = _endpoint_stats(grading.grader)
        if self.endpoint is not None:
            self.report.calls = self.report.tokens_in = self.report.tokens_out = 0
            self.report.latencies = []
        self.outcomes: list[tuple[Mapping[int, float], Mapping[int, float], ControlGroup] | None] = []
        self.seen: dict[str, int] = {}

    def _first_grading(self, requests: list[tuple[Any, ...]]) -> list[GradedGroup]:
        """The groups' first grading, with the judge's calls, tokens and latencies it took counted."""
        endpoint, report = self.endpoint, self.report
        before = None
        if endpoint is not None:
            before = (endpoint.calls, endpoint.tokens_in, endpoint.tokens_out, len(endpoint.latencies))
        start = time.perf_counter()
        graded = self.grading.grade_many(requests, preflight=True, shape=False)
        report.seconds += time.perf_counter() - start
        if endpoint is not None and before is not None:
            report.calls += endpoint.calls - before[0]  # type: ignore[operator]
            report.tokens_in += endpoint.tokens_in - before[1]  # type: ignore[operator]
            report.tokens_out += endpoint.tokens_out - before[2]  # type: ignore[operator]
            report.latencies.extend(endpoint.latencies[before[3] :])  # type: ignore[union-attr]
        return graded

    def _measure(self, group: ReferenceGroup, graded: GradedGroup) -> tuple[dict[int, float], tuple[Any, ...], Any]:
        """One graded group against its reference; returns its scores, its control's request and the control."""
        report, mode = self.report, self.grading.mode
        scores = pass_scores(graded, mode)
        tau = reference_tau(scores, group.reference, group.hacks)
        if tau is not None:
            report.taus.append(tau)
        flagged = set(graded.hacks)
        truth = {i for i in scores if group.hacks[i]}
        report.reference_hacks += len(truth)
        report.flagged_hacks += len(flagged)
        report.hits += len(flagged & truth)
        if len(scores) >= 2:
            report.multi_pass_groups += 1
            report.tied_groups += len(set(scores.values())) == 1
        tied, total = _identical_copies(group, scores)
        report.copies_tied += tied
        report.copies_total += total
        # Two groups of one task (a prompt asked twice) get reorderings of their own.
        self.seen[group.task_id] = self.seen.get(group.task_id, 0) + 1
        key = group.task_id if self.seen[group.task_id] == 1 else f"{group.task_id}#{self.seen[group.task_id]}"
        turn = sum(self.seen.values()) - 1  # the injections and surface changes in turn
        control = make_control(len(group.members), sorted(scores), seed=f"{self.seed}:{key}", turn=turn)
        shown = control.shown(group.members, changed_member)
        return scores, grade_request(group.task_id, shown), control

    def grade(self, pending: list[ReferenceGroup], progress: Callable[[int], None] | None) -> None:
        """A batch of groups graded, measured, and graded again reordered (their controls)."""
        if not pending:
            return
        report, grading = self.report, self.grading
        graded_batch = self._first_grading([grade_request(g.task_id, g.members) for g in pending])
        controlled = []
        for group, graded in zip(pending, graded_batch, strict=True):
            if graded.reason is not None:
                kind = graded.failure or graded.reason.split(":", 1)[0]
                report.failed[kind] = report.failed.get(kind, 0) + 1
                report.first_failures.setdefault(kind, graded.reason)
                report.unusable += kind == UNUSABLE
            else:
                controlled.append(self._measure(group, graded))
        if controlled:
            # A pass scored alone is the same prompt again (reward mode): asked past a judge's cache.
            fresh = grading.mode == "reward"
            again = grading.grade_many(
                [c[1] for c in controlled], preflight=True, record=False, shape=False, fresh=fresh
            )
            for (scores, _, control), second in zip(controlled, again, strict=True):
                if second.reason is not None:
                    report.control_failures += 1
                    report.unusable += (second.failure or second.reason.split(":", 1)[0]) == UNUSABLE
                    self.outcomes.append(None)
                else:
                    self.outcomes.append((scores, pass_scores(second, grading.mode), control))
        if progress is not None:
            progress(len(pending))

    def finish(self) -> JudgeEvalReport:
        report = self.report
        controls = controls_report(self.outcomes, position=grader_position(self.grading))
        report.self_taus = list(controls.taus)
        report.copies_tied += sum(controls.copies)
        report.copies_total += len(controls.copies)
        report.injections, report.injections_held = len(controls.injections), sum(controls.injections)
        report.position = controls.position
        report.surfaces = controls.surfaces
        if len(report.taus) >= 2:
            report.interval = bootstrap_interval(report.taus, seed=INTERVAL_SEED)
        report.grader = self.grading.figures()
        return report
