"""Graded rows from files: JSONL, JSON, Parquet (TRL's completion logs included) or a folder of them, as groups.

The spread gate reads rows with a group key (``scenario_id``), the verifier's reward and the rollout text, and
grades them group by group. Files are streamed, not loaded whole: a JSONL file is read line by line and a Parquet
file batch by batch, and a group is handed on as soon as the next group starts. When a group's rows are not
contiguous the reader makes a second pass that seeks to each group's rows by their recorded offsets, so memory
stays at one group plus one offset per row either way. A ``.json`` file (a list of rows) is parsed whole; use JSONL
for large inputs.

TRL's ``log_completions`` files (``completions/completions_00010.parquet``) are read with ``completion`` as the text,
``whileai_reward`` (the verifier's reward that whileai's reward functions log) as the reward, and ``whileai_group``
(the group each completion was generated in, also logged by whileai) as the group; a log without that column is
grouped by ``prompt``, and a log without ``whileai_reward`` needs ``reward_key`` (the error names its reward columns).
With ``steps_per_generation > 1`` TRL writes one generation into several files: a group read twice is dropped.

verl's rollout dumps (``trainer.rollout_data_dir``: ``{step}.jsonl`` with ``input``, ``output``, ``score``, ``step``)
are read with ``output`` as the text, ``input`` as the prompt, ``whileai_reward`` as the reward when whileai's reward
manager wrote it (else ``score``, which is the verifier's reward under any other manager), and as the group
``whileai_group``, else the ``uid`` of verl's v1 trainer (``{uid}_{session}_{output}``, read as ``uid``), else the
prompt.

JSONL lines are parsed with orjson when it is installed (``pip install 'whileai-grpo[fast]'``; ``WHILEAI_JSON=json``
turns it off), with the standard library otherwise. orjson only reads the plain rows (a string group, a number reward,
string text and prompt), where both parsers give the same values; every other line (a boolean reward, a numeric
group, chat messages, a line orjson refuses: NaN, integers beyond 64 bits, lone surrogates) is parsed again by the
standard library, so a file reads the same, with the same errors, either way.

Every bad row is a ``BadInput`` naming the file, the line (or Parquet row) and the field, unless ``skip_bad`` is set:
then it is skipped and counted in ``RowStats``. Nothing here grades.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, json_problem
from whileai.rows.fields import Member, RowFields, RowStats, plain_member, read_member
from whileai.rows.files import (
    fast_loads,
    first_columns,
    list_row_files,
    parse_line,
    raw_rows,
    row_place,
)

__all__ = ["GroupsNotContiguous", "iter_groups", "iter_rows", "read_rows"]


class GroupsNotContiguous(Exception):
    """Raised by a one-pass read (``contiguous=True``) when a group's rows turn out to be split: read again
    without the assumption."""


def _checked(row: Any, fields: RowFields, path: Path, number: int) -> tuple[str, Member]:
    """(group id, member) of a parsed row (or the parser's exception), or ``BadInput`` naming file, line and field."""
    if isinstance(row, Exception):
        raise BadInput(f"{row_place(path, number)}: not valid JSON ({json_problem(row)})")
    try:
        group, member = read_member(row, fields, "")
    except BadInput:
        group, member = read_member(row, fields, row_place(path, number))  # again, to name the place
    if fields.verl_sessions:
        group = fields.group_of(group, row_place(path, number))
    return group, member


def _members(path: Path, fields: RowFields, stats: RowStats, skip_bad: bool) -> Iterator[tuple[int, str, Member]]:
    """(position, group id, member) of every good row of one file."""
    if path.suffix == ".jsonl":
        yield from _jsonl_members(path, fields, stats, skip_bad)
        return
    for position, number, row in raw_rows(path):
        try:
            group, member = _checked(row, fields, path, number)
        except BadInput as err:
            if not skip_bad:
                raise
            stats.skip(str(err))
            continue
        stats.rows += 1
        yield position, group, member


def _slow_line(
    line: bytes, fields: RowFields, path: Path, number: int, stats: RowStats, skip_bad: bool
) -> tuple[str, Member] | None:
    """A JSONL line the fast path did not take, read by the standard library: its (group id, member), or None for a
    blank line or a bad one skipped (counted in ``stats``); a bad line without ``skip_bad`` is a ``BadInput``."""
    if not line.strip():
        return None
    try:
        return _checked(parse_line(line), fields, path, number)
    except BadInput as err:
        if not skip_bad:
            raise
        stats.skip(str(err))
        return None


def _index(path: Path, fields: RowFields, stats: RowStats, skip_bad: bool) -> tuple[dict[str, array], bool]:
    """First pass: every group's row positions, in order of first appearance, and whether groups are contiguous."""
    index: dict[str, array] = {}
    contiguous = True
    last: str | None = None
    for position, group, _ in _members(path, fields, stats, skip_bad):
        positions = index.get(group)
        if positions is None:
            positions = index[group] = array("q")
        elif group != last:
            contiguous = False
        positions.append(position)
        last = group
    return index, contiguous


def _read_indexed(
    path: Path, fields: RowFields, index: dict[str, array], contiguous: bool
) -> Iterator[tuple[str, list[Member]]]:
    """Second pass: the members of each indexed group (bad rows were dropped by the index)."""
    if path.suffix == ".jsonl" and not contiguous:
        with path.open("rb") as handle:
            for group, positions in index.items():
                members = []
                for position in positions:
                    handle.seek(position)
                    members.append(read_member(json.loads(handle.readline()), fields, str(path))[1])
                yield group, members
        return
    if contiguous:  # one sequential pass, a group at a time; bad rows were counted (or raised) by the first pass
        yield from _one_pass(path, fields, RowStats(), skip_bad=True)
        return
    # .json and .parquet whose groups are interleaved: collected in memory (write JSONL for huge inputs).
    wanted = {p: g for g, positions in index.items() for p in positions}
    collected: dict[str, list[Member]] = {g: [] for g in index}
    for position, _, row in raw_rows(path):
        group = wanted.get(position)
        if group is not None:
            collected[group].append(read_member(row, fields, str(path))[1])
    yield from collected.items()


def _jsonl_members(path: Path, fields: RowFields, stats: RowStats, skip_bad: bool) -> Iterator[tuple[int, str, Member]]:
    """``_members`` of a JSONL file, in one loop: the hot path of the spread gate.

    The lines are read a megabyte at a time. With orjson, a plain row (``plain_member``: a string group, a finite number
    reward, string text, a string or no prompt) is taken as orjson parsed it; any other line, and every line without
    orjson, goes through the standard library and ``member``, which name what is wrong with it.
    """
    loads = fast_loads()
    group_key, reward_key, text_key = fields.group_key, fields.reward_key, fields.text_key
    prompt_key = fields.prompt_key
    sessions = fields.verl_sessions
    number = offset = 0
    with path.open("rb", buffering=1 << 20) as handle:
        while lines := handle.readlines(1 << 20):
            for line in lines:
                number += 1
                start = offset
                offset += len(line)
                found = None
                if loads is not None:
                    try:
                        found = plain_member(loads(line), group_key, reward_key, text_key, prompt_key)  # type: ignore[arg-type]
                    except ValueError:  # orjson refused the line: the standard library decides, below
                        pass
                if found is None:
                    found = _slow_line(line, fields, path, number, stats, skip_bad)
                    if found is None:
                        continue
                elif sessions:
                    try:
                        found = (fields.group_of(found[0], row_place(path, number)), found[1])
                    except BadInput as err:
                        if not skip_bad:
                            raise
                        stats.skip(str(err))
                        continue
                stats.rows += 1
                yield start, found[0], found[1]


def _one_pass(path: Path, fields: RowFields, stats: RowStats, skip_bad: bool) -> Iterator[tuple[str, list[Member]]]:
    """Groups of a file whose groups are contiguous, in one pass; ``GroupsNotContiguous`` when one is split."""
    finished: set[str] = set()
    current: str | None = None
    members: list[Member] = []
    rows = _jsonl_members if path.suffix == ".jsonl" else _members  # the JSONL loop without a generator around it
    for _, group, member in rows(path, fields, stats, skip_bad):
        if group != current:
            if current is not None:
                finished.add(current)
                yield current, members
            if group in finished:
                raise GroupsNotContiguous(f"{path}: the rows of group {group!r} are not contiguous")
            current, members = group, []
        members.append(member)
    if current is not None:
        yield current, members


def iter_groups(
    path: str | Path,
    fields: RowFields | None = None,
    *,
    skip_bad: bool = False,
    stats: RowStats | None = None,
    contiguous: bool = False,
    steps: tuple[int, int] | None = None,
) -> Iterator[tuple[str, list[Member]]]:
    """Stream ``(group id, [(reward, prompt, text), ...])`` from a rows file or folder.

    Two passes per file: the first validates every row and records each group's row positions (8 bytes a row),
    the second reads the groups one at a time. With ``contiguous=True`` the file is read once, a group handed on as
    soon as the next one starts, and ``GroupsNotContiguous`` is raised if a group's rows turn out to be split (the
    caller then reads again without the assumption). Groups never span files: a group id is qualified by the file's
    path within the folder when a folder holds several files.

    Args:
        path: a ``.jsonl``, ``.json`` or ``.parquet`` file, or a folder of them.
        fields: the field names; defaults depend on the file's format (see ``RowFields.for_columns``).
        skip_bad: skip malformed rows (counted in ``stats``) instead of raising.
        stats: filled with rows read and skipped.
        steps: ``(first, last)``: only the completion logs of those steps of a training run.

    Raises:
        BadInput: a missing file, an unreadable file, or (without ``skip_bad``) a bad row, naming file, line, field.
        MissingExtra: a Parquet file without pyarrow installed.
    """
    stats = stats if stats is not None else RowStats()
    seen: set[bytes] = set()  # digests of the TRL-log groups read so far
    for file, chosen, by_label, prefix in _files(path, fields or RowFields(), stats, steps):
        if contiguous:
            groups = _one_pass(file, chosen, stats, skip_bad)
        else:
            index, in_order = _index(file, chosen, stats, skip_bad)
            groups = _read_indexed(file, chosen, index, in_order)
        for group, members in groups:
            if chosen.trl_log:
                # TRL writes one generation into every log file until the next generation (steps_per_generation
                # > 1): a repeat has the same label, or for a plain log the same prompt and completions.
                digest = _group_digest(group if by_label else None, members)
                if digest in seen:
                    stats.duplicates += 1
                    continue
                seen.add(digest)
            yield prefix + group, members
    if stats.rows == 0:
        what = f"all {stats.skipped} rows were bad" if stats.skipped else "it holds no rows"
        raise BadInput(f"{path}: nothing to grade: {what}")


def iter_rows(
    path: str | Path, fields: RowFields | None = None, *, stats: RowStats | None = None
) -> Iterator[tuple[str, str, Member, dict[str, Any]]]:
    """Stream every row of a rows file or folder as ``(where, group id, member, row)``, in file order.

    For readers that need fields besides the three the spread gate grades by (``whileai.grading.evaluate`` reads a
    reference quality): each row is checked as :func:`iter_groups` checks it and handed on whole, with ``where``
    (``"rows.jsonl line 7"``) for the reader's own errors. Group ids are qualified as :func:`iter_groups` qualifies
    them; groups are not formed, and a TRL log's repeated groups are not dropped. Every row is parsed by the standard
    library (no fast path).

    Raises:
        BadInput: a missing or unreadable file, a bad row (naming file, line and field), or no rows at all.
    """
    stats = stats if stats is not None else RowStats()
    for file, chosen, _, prefix in _files(path, fields or RowFields(), stats, None):
        for _, number, row in raw_rows(file):
            group, member = _checked(row, chosen, file, number)
            stats.rows += 1
            yield row_place(file, number), prefix + group, member, row
    if stats.rows == 0:
        raise BadInput(f"{path}: nothing to grade: it holds no rows")


def _files(
    path: str | Path, fields: RowFields, stats: RowStats, steps: tuple[int, int] | None
) -> Iterator[tuple[Path, RowFields, bool, str]]:
    """Each rows file of ``path`` (counted in ``stats``) with the fields its columns are read by, whether its groups
    are whileai's labels, and the prefix that makes its group ids unique."""
    files = list_row_files(path, stats.left_out, steps)
    for file in files:
        stats.files += 1
        chosen = fields.for_columns(first_columns(file), file)
        stats.read_as = stats.read_as or chosen.read_as
        # whileai's group labels ("step:group") are unique across a run's files; other groups are per file.
        by_label = chosen.trl_log and chosen.group_key == "whileai_group"
        prefix = f"{file.relative_to(path).as_posix()}:" if len(files) > 1 and not by_label else ""
        yield file, chosen, by_label, prefix


def _group_digest(label: str | None, members: list[Member]) -> bytes:
    """A group's identity for deduplication: its label, or its prompt and sorted completions."""
    if label is not None:
        return label.encode()
    content = json.dumps(sorted(members), ensure_ascii=False).encode()
    return hashlib.blake2b(content, digest_size=16).digest()


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a file or folder as dicts (small inputs; the spread gate streams with ``iter_groups``)."""
    rows = []
    for file in list_row_files(path):
        for _, number, row in raw_rows(file):
            if isinstance(row, Exception):
                raise BadInput(f"{row_place(file, number)}: not valid JSON ({json_problem(row)})")
            rows.append(row)
    return rows
