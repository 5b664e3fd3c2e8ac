"""Rows files: which files a path holds (a file, a folder, a training run's folder), and each file's raw rows with
their positions (byte offset and line of a JSONL file, index of a JSON list or a Parquet file), parsed by orjson
when it is installed (``WHILEAI_JSON=json`` turns it off) or by the standard library. Nothing here checks a row.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, MissingExtra, json_problem, needs_extra

__all__ = [
    "JSON_ENV",
    "SUFFIXES",
    "fast_loads",
    "first_columns",
    "json_parser",
    "list_row_files",
    "logged_step",
    "parse_line",
    "raw_rows",
    "row_place",
]

SUFFIXES = (".jsonl", ".json", ".parquet")

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


def fast_loads() -> Callable[[bytes], Any] | None:
    """orjson's parser when ``json_parser()`` picks it, else None."""
    if json_parser() != "orjson":
        return None
    import orjson

    return orjson.loads


def parse_line(line: bytes) -> Any:
    """One JSONL line parsed by the standard library, or the error that stands for it: a ``JSONDecodeError`` or
    ``UnicodeDecodeError``, a ``ValueError`` for a value Python will not hold (an integer of more than 4,300 digits),
    and one for nesting deeper than Python's stack."""
    try:
        # Without its line break: a fault at the line's end is then at its last column, not at column 1 of a next line.
        return _decode(line.decode("utf-8").rstrip("\r\n"))
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        return err
    except RecursionError:
        return ValueError("nested too deeply to read")


_LOG_STEP = re.compile(r"completions_(\d+)\.parquet")


def log_step(path: Path) -> int | None:
    """The step of one of TRL's completion logs (``completions_00012.parquet`` is step 12), None for another file."""
    match = _LOG_STEP.fullmatch(path.name)
    return int(match.group(1)) if match else None


def logged_step(trainer_state: Any, phase: str) -> int:
    """The step TRL logs a batch's completions under: in training the step the batch trains (``global_step + 1``, so
    the first generation is step 1, as TRL's logs and ``completions_00001.parquet`` count), in evaluation the step
    the model has reached (``global_step``).

    Example:
        >>> state = type("State", (), {"global_step": 3})()
        >>> logged_step(state, "train"), logged_step(state, "eval")
        (4, 3)
    """
    step = getattr(trainer_state, "global_step", 0)
    step = step if isinstance(step, int) else 0
    return step + 1 if phase == "train" else step


def list_row_files(
    path: str | Path, left_out: list[str] | None = None, steps: tuple[int, int] | None = None
) -> list[Path]:
    """The row files at ``path``: the file itself, or every row file under a folder, sorted.

    In a folder, a ``.json`` file counts only if it holds rows (a run folder also has ``config.json``,
    ``trainer_state.json`` and the like), and other suffixes are not rows; each file left out is appended to
    ``left_out`` as ``"name (why)"``. ``steps`` (first, last) keeps only TRL's completion logs of those steps.
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
            elif steps is not None and not steps[0] <= (log_step(p) or -1) <= steps[1]:
                continue  # another step's log, or no completion log at all: outside the window asked for
            else:
                files.append(p)
                continue
            if left_out is not None:
                left_out.append(f"{p.relative_to(root).as_posix()} ({why})")
        if not files and steps is not None:
            raise BadInput(f"{root}: no completion log (completions_NNNNN.parquet) of steps {steps[0]}-{steps[1]}")
        if not files:
            raise BadInput(f"{root}: no .jsonl, .json or .parquet rows files in this folder")
        return files
    if not root.exists():
        raise BadInput(f"{root}: no such file or folder")
    if root.suffix not in SUFFIXES:
        raise BadInput(f"{root}: rows must be .jsonl, .json or .parquet, not {root.suffix or 'a file without suffix'}")
    if steps is not None:
        raise BadInput(f"{root}: a window of steps reads a training run's folder (or its completions/), not one file")
    return [root]


def _holds_rows(path: Path) -> bool:
    """Whether a .json file is a rows file (a list, or an object with a "rows" list), read by its first bytes."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError:
        return False
    return head.startswith(b"[") or (head.startswith(b"{") and b'"rows"' in head[:64])


def _jsonl_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    """(offset, line number, parsed row or the JSONDecodeError) for every non-blank line, by the standard library."""
    with path.open("rb", buffering=1 << 20) as handle:
        offset = 0
        for number, line in enumerate(handle, start=1):
            start = offset
            offset += len(line)
            if not line.strip():
                continue
            yield start, number, parse_line(line)


def _json_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise BadInput(f"{path} line {err.lineno}: not valid JSON ({json_problem(err)})") from None
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror})") from None
    except ValueError as err:  # an integer of more than 4,300 digits
        raise BadInput(f"{path}: not JSON Python reads ({err})") from None
    except RecursionError:
        raise BadInput(f"{path}: nested too deeply to read") from None
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        data = data["rows"]
    if not isinstance(data, list):
        raise BadInput(f"{path}: a .json rows file holds a list of rows (or {{'rows': [...]}})")
    for number, row in enumerate(data):
        yield number, number, row


def _parquet_file(path: Path) -> Any:
    """``path`` opened by pyarrow (the parquet extra), or ``BadInput`` naming it."""
    with needs_extra("parquet", "reading .parquet rows"):
        import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(path)
    except Exception as err:
        raise BadInput(f"{path}: not a readable Parquet file ({err})") from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    number = 0
    for batch in _parquet_file(path).iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            yield number, number, row
            number += 1


def raw_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    if path.suffix == ".jsonl":
        return _jsonl_rows(path)
    if path.suffix == ".json":
        return _json_rows(path)
    return _parquet_rows(path)


def row_place(path: Path, number: int) -> str:
    return f"{path} line {number}" if path.suffix == ".jsonl" else f"{path} row {number}"


def first_columns(path: Path) -> list[str]:
    """The field names of the file's first row (its schema for Parquet)."""
    if path.suffix == ".parquet":
        return list(_parquet_file(path).schema_arrow.names)
    for _, _, row in raw_rows(path):
        if isinstance(row, dict):
            return list(row)
    return []
