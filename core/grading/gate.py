"""The spread gate: does a grader tell passes apart at all, and does it read them rather than their order?

Group normalization subtracts each group's mean, so a grader that gives every pass the same score changes nothing
but the cost (the text-to-SQL null result). The gate grades a sample of passes the way training would
and judges the spread of the scores; its controls (``whileai.grading.controls``) show some groups again, shuffled and
with one pass copied, to catch a grader that follows position. Everything the gate is lives here:

- its thresholds are ``whileai.grading.knobs.SpreadThresholds`` (the recipe's ``spread`` section extends them);
- ``check_spread_rows``, ``check_spread_groups``, ``check_spread_file``: the gate on rows, on streamed groups, on a
  rows file or folder (``GroupwiseGrading.check_spread``, ``whileai spread`` and ``whileai train`` call these);
- the verdict on what comes back is ``whileai.grading.verdict`` (``SpreadReport``, ``spread_report``: the page's two
  lines, three with controls); ``SpreadUnavailable`` here is a grader that gave out mid-check, with what had been
  counted.

It reads rows files through ``whileai.rows`` and prints nothing; the command line maps the verdict to an exit code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whileai.errors import GraderUnavailable, NoSpread, function_label, raised_line
from whileai.grading.controls import ControlsTally, changed_member
from whileai.grading.group import GradedGroup, grade_request
from whileai.grading.verdict import SpreadReport, spread_report
from whileai.methods import positive_passes
from whileai.rows.fields import RowFields, RowStats, read_member
from whileai.rows.groups import GroupsNotContiguous, iter_groups
from whileai.rows.rewards import FLOAT32_LIMIT

if TYPE_CHECKING:  # it delegates its check_spread here: the gate does not import it
    from whileai.grading.groupwise import GroupwiseGrading

__all__ = [
    "SpreadRun",
    "SpreadUnavailable",
    "check_spread_file",
    "check_spread_groups",
    "check_spread_rows",
    "trains_on_scores",
    "unavailable_report",
]


def check_spread_rows(
    grading: GroupwiseGrading,
    rows: Iterable[Mapping[str, Any]],
    strict: bool = True,
    *,
    group_key: str | None = None,
    reward_key: str | None = None,
    text_key: str | None = None,
    prompt_key: str = "prompt",
    controls: int = 0,
    seed: int = 0,
) -> SpreadReport:
    """``GroupwiseGrading.check_spread``: grade every group of ``rows`` with at least two passes and judge the
    spread of the grader's scores.

    Rows are read as ``whileai spread`` reads a rows file, their form known from the first row's fields: dicts with
    ``scenario_id``, ``reward`` and ``final_text`` (``prompt`` optional), logged rows (``prompt``, ``completion``,
    ``reward``: each ``task_id``, ``scenario_id`` or else prompt a group, said once on the ``whileai.rows`` logger),
    or a TRL completion log's; the keys name other fields. Groups keep the order of first appearance. A group with
    fewer than two passes cannot be told apart and is skipped; zeroed hacks give no score.

    With ``controls=N``, up to ``N`` graded groups are graded again in a shuffled order with a copy of one pass
    (``whileai.grading.controls``): a ranking that does not survive reordering, or identical passes told apart,
    is no spread either, and ``str(report)`` gains a third line with the figures. ``whileai spread`` and
    ``whileai train`` run them (the recipe's ``spread.controls``, 32 by default); here they are off by default.

    Returns:
        The report; ``str(report)`` is the two-line verdict (three with controls).

    Raises:
        ValueError: a row with a missing field or a non-numeric reward (naming the row and field); with
            ``strict``, no spread or too few scores, with what to change (``whileai.errors.NoSpread``, a
            ``ValueError``).
        GraderUnavailable: the grader could not be reached at all (a preflight does not fall back), or, with
            ``strict``, it failed on ``broken_fraction`` of the groups or more.
    """
    groups: dict[str, list[tuple[float, str, str]]] = {}
    fields = None
    for position, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"row {position}: not a dict but {type(row).__name__}")
        if fields is None:
            fields = RowFields(group_key, reward_key, text_key, prompt_key).for_columns(list(row))
            if fields.read_as:
                named = "group_key, text_key and reward_key name others"
                logging.getLogger("whileai.rows").warning("whileai: rows %s (%s)", fields.read_as, named)
        group, member = read_member(dict(row), fields, f"row {position}")  # None, NaN, inf: left out, counted
        groups.setdefault(group, []).append(member)
    return check_spread_groups(grading, groups.items(), strict=strict, controls=controls, seed=seed)


class SpreadUnavailable(GraderUnavailable):
    """``GraderUnavailable`` out of a spread check, with what the check had counted when the grader gave out, so
    ``whileai spread --json`` can still list the failures.

    Attributes:
        failed: groups that fell back, by kind; the groups of the batch in flight count as ``"unreachable"``.
        first_failures: the first reason of each kind.
        attempted: groups sent to the grader by then.
    """

    def __init__(
        self, message: str, *, failed: Mapping[str, int], first_failures: Mapping[str, str], attempted: int
    ) -> None:
        super().__init__(message)
        self.failed = dict(failed)
        self.first_failures = dict(first_failures)
        self.attempted = attempted


def unavailable_report(error: GraderUnavailable) -> dict[str, Any]:
    """The JSON report of a spread check the grader gave out on: verdict ``"broken"``, the error, and the failures
    counted by kind by then (a ``SpreadUnavailable``'s; else the error is its own failure).

    Example:
        >>> unavailable_report(GraderUnavailable("http 503"))["first_failures"]
        {'unreachable': 'http 503'}
    """
    attempted = getattr(error, "attempted", None)
    failed = getattr(error, "failed", None)
    first_failures = getattr(error, "first_failures", None)
    sent = f"after {attempted} group(s) sent" if attempted is not None else "before a verdict"
    return {
        "verdict": "broken",
        "unavailable": True,
        "error": str(error),
        "attempted_groups": attempted,
        "failed_groups": dict(failed or {}),
        "first_failures": dict(first_failures or {GraderUnavailable.kind: str(error)}),
        "summary": f"spread check: stopped {sent}: the grader is unavailable",
        "conclusion": f"spread: broken. The grader is unavailable: {str(error).rstrip('.')}. Fix the grader or reach "
        "its endpoint (whileai --debug spread ... shows the traceback) and run the gate again.",
    }


def check_spread_groups(
    grading: GroupwiseGrading,
    groups: Iterable[tuple[str, Sequence[tuple[float, str, str]]]],
    strict: bool = True,
    progress: Callable[[int, int], None] | None = None,
    batch_size: int = 64,
    on_graded: Callable[[GradedGroup], None] | None = None,
    controls: int = 0,
    seed: int = 0,
) -> SpreadReport:
    """The spread gate on groups given as ``(task_id, [(reward, prompt, completion), ...])``.

    The streaming form of :func:`check_spread_rows` (the command line feeds it group by group). Groups reach the
    grader ``batch_size`` at a time, so a grader with a batch method (the HTTP judge) works on them concurrently;
    ``progress`` is called with ``(groups done, groups sent)``, control groups included, as each batch is sent and
    as it comes back; ``on_graded`` with each graded group (for a per-group table). ``controls`` and ``seed``: see
    :func:`check_spread_rows`; the control groups are graded after their batch and are not counted in ``stats``.

    Raises:
        SpreadUnavailable: the grader could not be reached (a ``GraderUnavailable``), with the failures counted so
            far; and with ``strict``, see :func:`check_spread_rows`.
    """
    run = _GateRun(grading, controls, seed, progress, on_graded)
    pending: list[tuple[str, Sequence[tuple[float, str, str]]]] = []
    try:
        for task, members in groups:
            run.unscorable += sum(not -FLOAT32_LIMIT < m[0] < FLOAT32_LIMIT for m in members)
            if sum(0 < m[0] < FLOAT32_LIMIT for m in members) < 2:
                run.skipped += 1
                continue
            pending.append((task, members))
            run.attempted += 1
            if len(pending) >= batch_size:
                run.flush(pending)
                pending = []
        run.flush(pending)
    except GraderUnavailable as error:
        cut = dict(run.failed)
        if run.in_flight:  # the groups of the batch it gave out on (not their controls)
            cut[GraderUnavailable.kind] = cut.get(GraderUnavailable.kind, 0) + run.in_flight
        first = {**run.first_failures, GraderUnavailable.kind: str(error)}
        raise SpreadUnavailable(str(error), failed=cut, first_failures=first, attempted=run.attempted) from error
    report = run.report()
    if strict and report.verdict == "broken":
        raise GraderUnavailable(str(report))
    if strict and not report.ok:
        raise NoSpread(str(report))
    return report


def trains_on_scores(group: GradedGroup, mode: str) -> bool:
    """Whether training would use this graded group's scores. Reward mode: every group with scores (equation 2 sets
    each pass's reward). Advantage mode: training sends the grader only a group with a pass above its mean by the
    verifier (an all-pass group has no advantage to move, so a hack the gate finds in one is never seen in
    training), and equation 3 redistributes only among the passes above the mean once hacks count as failures: two
    or more of them.

    Example:
        >>> from whileai.grading.group import GradedGroup, grade_request
        >>> def group(rewards, effective):
        ...     return GradedGroup("t", rewards, [r > 0 for r in rewards], effective, list(rewards), scores=[1.0, 0.5])
        >>> trains_on_scores(group([1, 1, 0], [1, 1, 0]), "advantage"), trains_on_scores(group([1, 1, 1], [1, 1, 0]), "advantage")
        (True, False)
    """  # noqa: E501
    if mode == "reward":
        return len(group.scores) > 1
    scorable = [i for i, r in enumerate(group.rewards) if r == r]  # NaN: a member the verifier could not score
    if not positive_passes([group.rewards[i] for i in scorable]):
        return False
    return len(positive_passes([group.effective_rewards[i] for i in scorable])) > 1


class _GateRun:
    """``check_spread_groups``'s state: the scores by group, the failures, the controls, the counts."""

    def __init__(
        self,
        grading: GroupwiseGrading,
        controls: int,
        seed: int,
        progress: Callable[[int, int], None] | None,
        on_graded: Callable[[GradedGroup], None] | None,
    ) -> None:
        self.grading, self.controls, self.on_graded = grading, controls, on_graded
        self.tell = progress if progress is not None else lambda done, sent: None
        self.per_group: dict[str, list[float]] = {}
        self.failed: dict[str, int] = {}
        self.first_failures: dict[str, str] = {}
        self.first_error: BaseException | None = None
        self.hacks: dict[str, list[int]] = {}
        self.tally = ControlsTally(controls, grading.mode, seed)
        self.skipped = self.attempted = self.unscorable = 0
        self.movable = self.emptied = 0  # graded groups whose scores training uses; whose hacks left < 2 passes
        self.moving: list[float] = []  # the scores of the former
        self.done = self.sent = 0  # groups graded and sent, controls included
        self.in_flight = 0  # groups of the batch being graded (not its controls)

    def _grade(self, requests: list[tuple[Any, ...]], **how: Any) -> list[GradedGroup]:
        self.sent += len(requests)
        self.tell(self.done, self.sent)
        graded = self.grading.grade_many(requests, preflight=True, **how)
        self.done += len(requests)
        self.tell(self.done, self.sent)
        return graded

    def flush(self, pending: list[tuple[str, Sequence[tuple[float, str, str]]]]) -> None:
        """A batch graded (equation 3 only when someone sees the groups: the verdict reads scores, hacks and
        failures), then its controls."""
        if not pending:
            return
        self.in_flight = len(pending)
        graded_batch = self._grade(
            [grade_request(task, members) for task, members in pending], shape=self.on_graded is not None
        )
        self.in_flight = 0
        again: list[tuple[Any, ...]] = []
        for (task, members), graded in zip(pending, graded_batch, strict=True):
            if graded.reason is not None:
                kind = graded.failure or graded.reason.split(":", 1)[0]
                self.failed[kind] = self.failed.get(kind, 0) + 1
                self.first_failures.setdefault(kind, graded.reason)
                if graded.error is not None and self.first_error is None:
                    self.first_error = graded.error
            else:
                key, copy = task, 1
                while key in self.per_group:  # two groups of one task (a prompt asked twice) stay two groups
                    copy += 1
                    key = f"{task}#{copy}"
                self.per_group[key] = graded.scores
                if graded.hacks:
                    self.hacks[key] = graded.hacks
                    self.emptied += len(graded.scores) < 2
                if trains_on_scores(graded, self.grading.mode):
                    self.movable += 1
                    self.moving += graded.scores
                control = self.tally.see(key, graded, [m[2] for m in members])
                if control is not None:
                    again.append(grade_request(task, control.shown(members, changed_member)))
            if self.on_graded is not None:
                self.on_graded(graded)
        if again:
            # Reward mode scores each pass alone, the first grading's prompts again: asked past a judge's cache.
            fresh = self.grading.mode == "reward"
            self.tally.answered(self._grade(again, record=False, shape=False, fresh=fresh))

    def report(self) -> SpreadReport:
        limits = self.grading.spread
        control_figures = None
        if self.controls:
            control_figures = self.tally.report(self.grading)
        report = spread_report(
            self.per_group,
            thresholds=limits,
            mode=self.grading.mode,
            skipped=self.skipped,
            failed=self.failed,
            hacks=self.hacks,
            attempted=self.attempted,
            first_failures=self.first_failures,
            controls=control_figures,
            unscorable=self.unscorable,
            movable=self.movable,
            emptied=self.emptied,
            moving=self.moving,
        )
        report.first_error = self.first_error if self.first_error is not None else self.tally.first_error
        grader = self.grading.grader
        plain = not any(callable(getattr(grader, m, None)) for m in ("grade_groups", "score_passes"))
        # The user's own function, named by the line of its file that raised (where the first failure came from).
        report.grader = function_label(grader, raised_line(grader, report.first_error)) if plain else ""
        return report


@dataclass
class SpreadRun:
    """A spread check on a file: the report and what the reader saw."""

    report: SpreadReport
    rows: RowStats

    def as_dict(self) -> dict[str, object]:
        data = self.report.as_dict()
        data["rows"] = {
            "read": self.rows.rows,
            "skipped": self.rows.skipped,
            "files": self.rows.files,
            "left_out_files": list(self.rows.left_out),
            "duplicate_groups": self.rows.duplicates,
        }
        if self.rows.examples:
            data["rows"]["skipped_examples"] = list(self.rows.examples)  # type: ignore[index]
        return data


def check_spread_file(
    path: str | Path,
    grading: GroupwiseGrading,
    fields: RowFields | None = None,
    *,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    on_graded: Callable[[GradedGroup], None] | None = None,
    on_restart: Callable[[], None] | None = None,
    controls: int = 0,
    seed: int = 0,
    steps: tuple[int, int] | None = None,
) -> SpreadRun:
    """Grade the groups of a rows file or folder with ``grading`` and return the spread verdict (never raises on
    no spread; ``BadInput`` on bad rows unless ``skip_bad``; ``GraderUnavailable`` when the grader cannot be reached).
    ``on_restart`` is called when the file is read a second time, so per-group output can be reset. ``controls``
    and ``seed``: :func:`check_spread_rows`'s; ``steps``: only a training run's completion logs of those steps.
    """
    # Rows usually come grouped (TRL logs, simulate, most exports): read once. If a group turns out to be split,
    # forget what was counted and read again by index (a judge then answers from its cache).
    before = grading.stats.snapshot()
    for contiguous in (True, False):
        stats = RowStats()
        groups = iter_groups(path, fields, skip_bad=skip_bad, stats=stats, contiguous=contiguous, steps=steps)
        try:
            report = check_spread_groups(
                grading, groups, strict=False, progress=progress, on_graded=on_graded, controls=controls, seed=seed
            )
            return SpreadRun(report, stats)
        except GroupsNotContiguous:  # only the first reading raises it
            grading.stats = before
            if on_restart is not None:
                on_restart()
    raise AssertionError("unreachable: the second reading is by index")  # pragma: no cover
