"""Groups whose quality is known: the reference ``whileai judge-eval`` measures a grader against.

A rows file carries, beside each rollout, a quality (higher is better) or a reference rank (1 is best), and whether it
is a hack (``whileai simulate`` writes them); ``read_reference`` reads its groups, ``reference_tau`` is a grading's
Kendall's tau-b against one. ``whileai.grading.evaluate`` grades them and reports.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whileai.errors import BadInput
from whileai.rows.fields import Member, RowFields, RowStats
from whileai.rows.groups import iter_rows
from whileai.stats import kendall_tau

__all__ = ["HACK_FIELD", "REFERENCE_FIELDS", "ReferenceGroup", "read_reference", "reference_tau"]

# The row fields that carry the reference: a quality (higher is better) or a rank (1 is best); and which are hacks.
REFERENCE_FIELDS = ("quality", "reference_rank")
HACK_FIELD = "hack"


@dataclass(frozen=True)
class ReferenceGroup:
    """One group with its reference.

    Attributes:
        task_id: the group's id.
        members: ``(reward, prompt, completion)`` per rollout, as ``whileai.rows`` reads them.
        reference: each rollout's reference value, higher is better (a rank ``r`` is held as ``-r``); None where a
            rollout has none.
        hacks: whether each rollout is a reference hack.
    """

    task_id: str
    members: list[Member]
    reference: list[float | None]
    hacks: list[bool]


def _reference_value(row: Mapping[str, Any], where: str) -> tuple[str, float] | None:
    """(field, value higher-is-better) of a row, None when it carries no reference; ``BadInput`` for a bad value."""
    present = [name for name in REFERENCE_FIELDS if row.get(name) is not None]
    if not present:
        return None
    if len(present) == 2:
        raise BadInput(f"{where}: give 'quality' or 'reference_rank', not both")
    name = present[0]
    value = row[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise BadInput(f"{where}: field {name!r} is not a finite number (got {value!r})")
    if name == "reference_rank":
        if value < 1 or value != int(value):
            raise BadInput(f"{where}: field 'reference_rank' must be a whole number >= 1, 1 the best (got {value!r})")
        return name, -float(value)
    return name, float(value)


def _hack_value(row: Mapping[str, Any], where: str) -> bool:
    value = row.get(HACK_FIELD)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadInput(f"{where}: field {HACK_FIELD!r} must be true or false (got {value!r})")
    return value


def read_reference(
    path: str | Path, fields: RowFields | None = None, *, stats: RowStats | None = None
) -> list[ReferenceGroup]:
    """The groups of a rows file or folder with their reference, in order of first appearance.

    Rows are read by ``whileai.rows.iter_rows`` (the gate's fields and checks) and must carry ``quality`` (a number,
    higher is better) or ``reference_rank`` (a whole number, 1 the best, ties allowed), one of the two for the whole
    input; ``hack`` (true or false) is optional. A row without either field (a failure nobody ranked) has no
    reference. The groups are held in memory: a reference set is small.

    Raises:
        BadInput: a bad row or a bad reference value (naming file, line and field), or no row with a reference
            field at all (naming the file and the fields).
    """
    building: dict[str, tuple[list[Member], list[float | None], list[bool]]] = {}
    used: str | None = None
    for where, group, member, row in iter_rows(path, fields, stats=stats):
        found = _reference_value(row, where)
        if found is not None:
            if used is not None and found[0] != used:
                raise BadInput(f"{where}: field {found[0]!r}, but earlier rows use {used!r}: use one of the two")
            used = found[0]
        members, reference, hacks = building.setdefault(group, ([], [], []))
        members.append(member)
        reference.append(None if found is None else found[1])
        hacks.append(_hack_value(row, where))
    if used is None:
        raise BadInput(
            f"{path}: no row has the field 'quality' (a number, higher is better) or 'reference_rank' (1 is best): "
            "judge-eval measures the grader against it (whileai simulate writes 'quality')"
        )
    return [ReferenceGroup(task, *parts) for task, parts in building.items()]


def reference_tau(
    scores: Mapping[int, float], reference: Sequence[float | None], hacks: Sequence[bool]
) -> float | None:
    """Kendall's tau-b between a grader's scores of the passes (by index) and the reference, over the passes that
    have a reference; a reference hack counts as below every other pass.

    Returns None when the reference does not order those passes (fewer than two, or all equal), and 0 when it does
    but the grader ties them all.

    Example:
        >>> reference_tau({0: 1.0, 1: 0.5, 2: 0.0}, [0.9, 0.4, 0.8], [False, False, True])
        1.0
        >>> reference_tau({0: 1.0, 1: 1.0}, [0.9, 0.4], [False, False]), reference_tau({0: 1.0}, [0.9], [False])
        (0.0, None)
    """
    known = [i for i in scores if hacks[i] or reference[i] is not None]
    values = [reference[i] for i in known if not hacks[i]]
    floor = min((v for v in values if v is not None), default=0.0) - 1.0
    ranked = {i: floor if hacks[i] else float(reference[i]) for i in known}  # type: ignore[arg-type]
    if len(set(ranked.values())) < 2:
        return None
    tau = kendall_tau(scores, ranked)
    return 0.0 if tau is None else tau
