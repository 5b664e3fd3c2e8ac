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

JSONL lines are parsed with orjson when it is installed (``pip install 'whileai[fast]'``; ``WHILEAI_JSON=json``
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
import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, MissingExtra
from whileai.grading.rewards import FLOAT32_LIMIT, verifier_reward
from whileai.grading.text import completion_text, prompt_text

__all__ = [
    "GroupsNotContiguous",
    "RowFields",
    "RowStats",
    "iter_groups",
    "iter_rows",
    "json_parser",
    "list_row_files",
    "read_rows",
]


class GroupsNotContiguous(Exception):
    """Raised by a one-pass read (``contiguous=True``) when a group's rows turn out to be split: read again
    without the assumption."""


SUFFIXES = (".jsonl", ".json", ".parquet")
Member = tuple[float, str, str]  # (reward, prompt, completion text)


# Columns of a TRL completion log that are not a reward function's.
_TRL_LOG_COLUMNS = frozenset({"step", "prompt", "completion", "advantage", "images", "image"})

# The environment variable that picks the JSONL parser: "json" (the standard library), "orjson", or unset (orjson
# when it is installed).
JSON_ENV = "WHILEAI_JSON"

_decode = json.JSONDecoder().decode


def json_parser() -> str:
    """The parser JSONL rows are read with: ``"orjson"`` or ``"json"`` (the standard library).

    orjson when it is installed, unless ``WHILEAI_JSON=json``; ``WHILEAI_JSON=orjson`` without orjson installed is a
    ``MissingExtra``. Read at every call, so a test or a benchmark can switch parsers in one process.
    """
    wanted = os.environ.get(JSON_ENV, "").strip().lower()
    if wanted not in ("", "json", "orjson"):
        raise BadInput(f"{JSON_ENV}={wanted!r}: use 'json' (the standard library) or 'orjson', or leave it unset")
    if wanted == "json":
        return "json"
    try:
        import orjson  # noqa: F401
    except ImportError:
        if wanted == "orjson":
            raise MissingExtra("orjson", "fast", f"{JSON_ENV}=orjson") from None
        return "json"
    return "orjson"


def _fast_loads() -> Callable[[bytes], Any] | None:
    """orjson's parser when ``json_parser()`` picks it, else None."""
    if json_parser() != "orjson":
        return None
    import orjson

    return orjson.loads


def _parse_line(line: bytes) -> Any:
    """One JSONL line parsed by the standard library, or the ``JSONDecodeError``/``UnicodeDecodeError`` it raised."""
    try:
        return _decode(line.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return err


@dataclass(frozen=True)
class RowFields:
    """The field names a row is read by; None picks the default for the file's format.

    ``trl_log`` marks a TRL completion log (set by ``for_columns``): its groups are deduplicated across files.
    """

    group_key: str | None = None
    reward_key: str | None = None
    text_key: str | None = None
    prompt_key: str = "prompt"
    trl_log: bool = False
    verl_sessions: bool = False

    def group_of(self, value: Any, where: str) -> Any:
        """The group a row's group value names: a verl v1 dump's ``{uid}_{session}_{output}`` key is its ``uid``
        (a session of several outputs is refused, naming ``where``); any other value is its own group."""
        if not self.verl_sessions or type(value) is not str:
            return value
        parts = value.rsplit("_", 2)
        if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
            return value
        if parts[2] != "0":
            raise BadInput(
                f"{where}: verl output {parts[2]} of session {parts[0]}_{parts[1]}: a session with several outputs "
                "has no one text to grade; whileai reads rollouts of one output per session"
            )
        return parts[0]

    def for_columns(self, columns: Sequence[str], path: Path | None = None) -> RowFields:
        """Fill the defaults: TRL completion logs (a ``completion`` and an ``advantage`` column) or page rows.

        Raises:
            BadInput: a TRL log without whileai's ``whileai_reward`` column and no ``reward_key`` given, naming the
                reward columns the log has.
        """
        trl_log = "completion" in columns and "advantage" in columns and "final_text" not in columns
        if trl_log:
            if self.reward_key is None and "whileai_reward" not in columns:
                rewards = [c for c in columns if c not in _TRL_LOG_COLUMNS and not c.startswith("whileai_")]
                found = ", ".join(repr(c) for c in rewards) or "none"
                raise BadInput(
                    f"{path or 'the rows'}: a TRL completion log without whileai's 'whileai_reward' column (the run "
                    f"did not train with whileai's reward function); its reward columns: {found}. Name the one that "
                    "says pass or fail with --reward-key (spread.reward_key in a recipe)"
                )
            # whileai's reward functions log each completion's group; without it, a group is a prompt.
            return RowFields(
                self.group_key or ("whileai_group" if "whileai_group" in columns else "prompt"),
                self.reward_key or "whileai_reward",
                self.text_key or "completion",
                self.prompt_key,
                trl_log=True,
            )
        if {"input", "output", "score", "step"} <= set(columns) and "final_text" not in columns:  # verl's dump
            if self.group_key is not None:
                group = self.group_key
            else:
                group = next((c for c in ("whileai_group", "uid") if c in columns), "input")
            return RowFields(
                group,
                self.reward_key or ("whileai_reward" if "whileai_reward" in columns else "score"),
                self.text_key or "output",
                "input" if self.prompt_key == "prompt" else self.prompt_key,
                verl_sessions=group == "uid",
            )
        return RowFields(
            self.group_key or "scenario_id",
            self.reward_key or "reward",
            self.text_key or "final_text",
            self.prompt_key,
        )


@dataclass
class RowStats:
    """What the reader saw: rows read, rows skipped as bad (with the first few reasons), files read, files of a
    folder left out (each with why), and groups dropped as repeats of a group already read (a TRL log that wrote one
    generation into two files)."""

    rows: int = 0
    skipped: int = 0
    files: int = 0
    examples: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    duplicates: int = 0

    def skip(self, reason: str) -> None:
        self.skipped += 1
        if len(self.examples) < 5:
            self.examples.append(reason)


def list_row_files(path: str | Path, left_out: list[str] | None = None) -> list[Path]:
    """The row files at ``path``: the file itself, or every row file under a folder, sorted.

    In a folder, a ``.json`` file counts only if it holds rows (a run folder also has ``config.json``,
    ``trainer_state.json`` and the like), and other suffixes are not rows; each file left out is appended to
    ``left_out`` as ``"name (why)"``.
    """
    root = Path(path)
    run_markers = ("trainer_state.json", "whileai_run.json")
    if (root / "completions").is_dir() and any((root / name).is_file() for name in run_markers):
        # A training run's folder: its rows are TRL's completion logs (grading.jsonl and the checkpoints are not).
        if left_out is not None:
            left_out.append("everything but completions/ (a training run's folder: its rows are its completion logs)")
        root = root / "completions"
    if root.is_dir():
        files = []
        for p in sorted(root.rglob("*")):
            if not p.is_file():
                continue
            if p.suffix not in SUFFIXES:
                why = "not .jsonl, .json or .parquet"
            elif p.suffix == ".json" and not _holds_rows(p):
                why = "unreadable" if not os.access(p, os.R_OK) else "a .json file that holds no rows"
            elif not os.access(p, os.R_OK):
                why = "unreadable"
            else:
                files.append(p)
                continue
            if left_out is not None:
                left_out.append(f"{p.relative_to(root).as_posix()} ({why})")
        if not files:
            raise BadInput(f"{root}: no .jsonl, .json or .parquet rows files in this folder")
        return files
    if not root.exists():
        raise BadInput(f"{root}: no such file or folder")
    if root.suffix not in SUFFIXES:
        raise BadInput(f"{root}: rows must be .jsonl, .json or .parquet, not {root.suffix or 'a file without suffix'}")
    return [root]


def _holds_rows(path: Path) -> bool:
    """Whether a .json file is a rows file (a list, or an object with a "rows" list), read by its first bytes."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError:
        return False
    return head.startswith(b"[") or (head.startswith(b"{") and b'"rows"' in head[:64])


def _group_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value)


def _plain(row: Any, group_key: str, reward_key: str, text_key: str, prompt_key: str) -> tuple[str, Member] | None:
    """(group id, member) of a plain row: a dict with a string group, a finite float (or an integer a float holds
    exactly) reward, string text and a string or no prompt. None for anything else (``_member`` decides).

    Checked by type only: the common case, and the only rows the fast JSON parser's values are taken for.
    """
    if type(row) is not dict:
        return None
    group, reward, text = row.get(group_key), row.get(reward_key), row.get(text_key)
    prompt = row.get(prompt_key)
    if (
        type(group) is str
        and (type(reward) is float or (type(reward) is int and -(2**53) <= reward <= 2**53))
        and -FLOAT32_LIMIT < reward < FLOAT32_LIMIT
        and type(text) is str
        and (prompt is None or type(prompt) is str)
    ):
        return group, (float(reward), prompt or "", text)
    return None


def _member(row: Any, fields: RowFields, where: str) -> tuple[str, Member]:
    """(group id, member) of one row, or ``BadInput`` naming ``where`` and the field."""
    plain = _plain(row, fields.group_key, fields.reward_key, fields.text_key, fields.prompt_key)  # type: ignore[arg-type]
    if plain is not None:
        return plain
    if not isinstance(row, dict):
        raise BadInput(f"{where}: a row is a JSON object, got {type(row).__name__}")
    for key in (fields.group_key, fields.reward_key, fields.text_key):
        if key not in row:
            raise BadInput(f"{where}: missing field {key!r}")
    group = row[fields.group_key]
    if group is None:
        raise BadInput(f"{where}: field {fields.group_key!r} is empty")
    try:
        # None, NaN and inf (TRL logs a verifier's None as NaN) are unscorable: the gate leaves them out, counted.
        reward = verifier_reward(row[fields.reward_key])
    except ValueError:
        given = row[fields.reward_key]
        raise BadInput(f"{where}: field {fields.reward_key!r} is not a number (got {given!r})") from None
    text = row[fields.text_key]
    if text is None or not isinstance(text, (str, list, dict)):
        raise BadInput(f"{where}: field {fields.text_key!r} is not text or a list of messages (got {text!r})")
    prompt = row.get(fields.prompt_key)
    prompt = "" if prompt is None else prompt_text(prompt)
    return _group_value(group), (float(reward), prompt, completion_text(text))


# ---------------------------------------------------------------- raw rows, with their positions


def _jsonl_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    """(offset, line number, parsed row or the JSONDecodeError) for every non-blank line, by the standard library."""
    with path.open("rb", buffering=1 << 20) as handle:
        offset = 0
        for number, line in enumerate(handle, start=1):
            start = offset
            offset += len(line)
            if not line.strip():
                continue
            yield start, number, _parse_line(line)


def _json_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise BadInput(f"{path} line {err.lineno}: not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror})") from None
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        data = data["rows"]
    if not isinstance(data, list):
        raise BadInput(f"{path}: a .json rows file holds a list of rows (or {{'rows': [...]}})")
    for number, row in enumerate(data):
        yield number, number, row


def _parquet_batches(path: Path, columns: list[str] | None = None) -> Iterator[list[dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra("pyarrow", "parquet", "reading .parquet rows") from None
    try:
        reader = pq.ParquetFile(path)
    except Exception as err:
        raise BadInput(f"{path}: not a readable Parquet file ({err})") from None
    for batch in reader.iter_batches(batch_size=4096, columns=columns):
        yield batch.to_pylist()


def _parquet_columns(path: Path) -> list[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra("pyarrow", "parquet", "reading .parquet rows") from None
    try:
        return list(pq.ParquetFile(path).schema_arrow.names)
    except Exception as err:
        raise BadInput(f"{path}: not a readable Parquet file ({err})") from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    number = 0
    for batch in _parquet_batches(path):
        for row in batch:
            yield number, number, row
            number += 1


def _raw_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    if path.suffix == ".jsonl":
        return _jsonl_rows(path)
    if path.suffix == ".json":
        return _json_rows(path)
    return _parquet_rows(path)


def _where(path: Path, number: int) -> str:
    return f"{path} line {number}" if path.suffix == ".jsonl" else f"{path} row {number}"


def _first_columns(path: Path) -> list[str]:
    """The field names of the file's first row (its schema for Parquet)."""
    if path.suffix == ".parquet":
        return _parquet_columns(path)
    for _, _, row in _raw_rows(path):
        if isinstance(row, dict):
            return list(row)
    return []


# ---------------------------------------------------------------- groups


def _checked(row: Any, fields: RowFields, path: Path, number: int) -> tuple[str, Member]:
    """(group id, member) of a parsed row (or the parser's exception), or ``BadInput`` naming file, line and field."""
    if isinstance(row, Exception):
        raise BadInput(f"{_where(path, number)}: not valid JSON ({getattr(row, 'msg', row)})")
    try:
        group, member = _member(row, fields, "")
    except BadInput:
        group, member = _member(row, fields, _where(path, number))  # again, to name the place
    if fields.verl_sessions:
        group = fields.group_of(group, _where(path, number))
    return group, member


def _members(path: Path, fields: RowFields, stats: RowStats, skip_bad: bool) -> Iterator[tuple[int, str, Member]]:
    """(position, group id, member) of every good row of one file."""
    if path.suffix == ".jsonl":
        yield from _jsonl_members(path, fields, stats, skip_bad)
        return
    for position, number, row in _raw_rows(path):
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
        return _checked(_parse_line(line), fields, path, number)
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
                    members.append(_member(json.loads(handle.readline()), fields, str(path))[1])
                yield group, members
        return
    if contiguous:  # one sequential pass, a group at a time
        current: str | None = None
        members: list[Member] = []
        lookup = {positions[0]: g for g, positions in index.items()}
        last = {positions[-1] for positions in index.values()}
        # Bad rows were counted (or raised) by the first pass: here they are skipped.
        for position, _, member in _members(path, fields, RowStats(), skip_bad=True):
            if position in lookup:
                current, members = lookup[position], []
            if current is None:
                continue
            members.append(member)
            if position in last:
                yield current, members
                current = None
        return
    # .json and .parquet whose groups are interleaved: collected in memory (write JSONL for huge inputs).
    wanted = {p: g for g, positions in index.items() for p in positions}
    collected: dict[str, list[Member]] = {g: [] for g in index}
    for position, _, row in _raw_rows(path):
        group = wanted.get(position)
        if group is not None:
            collected[group].append(_member(row, fields, str(path))[1])
    yield from collected.items()


def _jsonl_members(path: Path, fields: RowFields, stats: RowStats, skip_bad: bool) -> Iterator[tuple[int, str, Member]]:
    """``_members`` of a JSONL file, in one loop: the hot path of the spread gate.

    The lines are read a megabyte at a time. With orjson, a plain row (``_plain``: a string group, a finite number
    reward, string text, a string or no prompt) is taken as orjson parsed it; any other line, and every line without
    orjson, goes through the standard library and ``_member``, which name what is wrong with it.
    """
    loads = _fast_loads()
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
                        found = _plain(loads(line), group_key, reward_key, text_key, prompt_key)  # type: ignore[arg-type]
                    except ValueError:  # orjson refused the line: the standard library decides, below
                        pass
                if found is None:
                    found = _slow_line(line, fields, path, number, stats, skip_bad)
                    if found is None:
                        continue
                elif sessions:
                    try:
                        found = (fields.group_of(found[0], _where(path, number)), found[1])
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

    Raises:
        BadInput: a missing file, an unreadable file, or (without ``skip_bad``) a bad row, naming file, line, field.
        MissingExtra: a Parquet file without pyarrow installed.
    """
    fields = fields or RowFields()
    stats = stats if stats is not None else RowStats()
    files = list_row_files(path, stats.left_out)
    seen: set[bytes] = set()  # digests of the TRL-log groups read so far
    for file in files:
        stats.files += 1
        chosen = fields.for_columns(_first_columns(file), file)
        # whileai's group labels ("step:group") are unique across a run's files; other groups are per file.
        by_label = chosen.trl_log and chosen.group_key == "whileai_group"
        prefix = f"{file.relative_to(path).as_posix()}:" if len(files) > 1 and not by_label else ""
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
    fields = fields or RowFields()
    stats = stats if stats is not None else RowStats()
    files = list_row_files(path, stats.left_out)
    for file in files:
        stats.files += 1
        chosen = fields.for_columns(_first_columns(file), file)
        by_label = chosen.trl_log and chosen.group_key == "whileai_group"
        prefix = f"{file.relative_to(path).as_posix()}:" if len(files) > 1 and not by_label else ""
        for _, number, row in _raw_rows(file):
            group, member = _checked(row, chosen, file, number)
            stats.rows += 1
            yield _where(file, number), prefix + group, member, row
    if stats.rows == 0:
        raise BadInput(f"{path}: nothing to grade: it holds no rows")


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
        for _, number, row in _raw_rows(file):
            if isinstance(row, Exception):
                raise BadInput(f"{_where(file, number)}: not valid JSON ({getattr(row, 'msg', row)})")
            rows.append(row)
    return rows
