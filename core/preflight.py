"""The spread gate on a rows file: stream the groups, grade them, judge the spread. One call for the command line
and for ``whileai train``'s preflight.

It reads and grades; it prints nothing and never exits (the command line maps the verdict to an exit code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from whileai.grading.groupwise import GradedGroup, GroupwiseGrading
from whileai.grading.spread import SpreadReport
from whileai.rows import GroupsNotContiguous, RowFields, RowStats, iter_groups

__all__ = ["SpreadRun", "check_spread_file"]


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
    progress: Callable[[int], None] | None = None,
    on_graded: Callable[[GradedGroup], None] | None = None,
    on_restart: Callable[[], None] | None = None,
    controls: int = 0,
    seed: int = 0,
) -> SpreadRun:
    """Grade the groups of a rows file or folder with ``grading`` and return the spread verdict (never raises on
    no spread; ``BadInput`` on bad rows unless ``skip_bad``; ``GraderUnavailable`` when the grader cannot be reached).
    ``on_restart`` is called when the file is read a second time, so per-group output can be reset. ``controls``
    and ``seed``: ``GroupwiseGrading.check_spread``'s.
    """
    # Rows usually come grouped (TRL logs, simulate, most exports): read once. If a group turns out to be split,
    # forget what was counted and read again by index (a judge then answers from its cache).
    before = grading.stats.snapshot()
    stats = RowStats()
    try:
        groups = iter_groups(path, fields, skip_bad=skip_bad, stats=stats, contiguous=True)
        report = grading.check_spread_groups(
            groups, strict=False, progress=progress, on_graded=on_graded, controls=controls, seed=seed
        )
    except GroupsNotContiguous:
        grading.stats = before
        if on_restart is not None:
            on_restart()
        stats = RowStats()
        groups = iter_groups(path, fields, skip_bad=skip_bad, stats=stats)
        report = grading.check_spread_groups(
            groups, strict=False, progress=progress, on_graded=on_graded, controls=controls, seed=seed
        )
    return SpreadRun(report, stats)
