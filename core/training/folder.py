"""A training run's folder: what is in it, how a run continues in it, and how it says the way a run ended.

One folder holds the whole run: ``recipe.yaml``, ``spread_gate.json``, ``whileai_run.json``, ``grading.jsonl`` (a
line per graded group, ``step`` counted as TRL counts: from 1), TRL's ``completions/completions_NNNNN.parquet``
(named by the step they were logged at), ``checkpoint-N``,
``trainer_state.json``, ``final/``. A folder that holds a run's training output is used: a new run goes elsewhere,
or continues it with ``--resume``. A resume from ``checkpoint-N`` replays the steps after N, so what they logged is
dropped first and every step is logged once. One process at a time writes into a run folder (``run_lock``).

Plain files only: no torch, no TRL.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import resource
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, json_problem
from whileai.grading.watch import WatchLog
from whileai.rows.files import logged_step
from whileai.yamldata import read_yaml_file

__all__ = [
    "EVAL_FORMAT",
    "HOLDER_FILE",
    "GradingLog",
    "begin_record",
    "eval_file",
    "forget_after",
    "last_checkpoint",
    "mark_run",
    "read_grading_log",
    "rebuild_record",
    "refused_write",
    "run_lock",
    "training_output",
    "write_json",
]


# What ``whileai eval`` writes into a run folder, and ``whileai report`` reads.
EVAL_FORMAT = "whileai-eval/1"


def eval_file(run: Path, checkpoint: str | None = None) -> Path:
    """Where ``whileai eval`` writes (and ``whileai report`` reads) a run's held-out figures."""
    return run / ("eval.json" if checkpoint is None else f"eval-{checkpoint}.json")


# Who holds a run folder, written by the holder while it holds it (the lock itself is on the folder).
HOLDER_FILE = ".whileai-holder"


@contextmanager
def run_lock(out: Path, command: str) -> Iterator[None]:
    """Hold the run folder ``out`` for this process while the block runs: a second ``whileai train``, ``--resume`` or
    ``eval`` on the same folder is refused at once instead of writing into it too.

    The lock is the kernel's (``flock`` on the folder), so it is released however the holder ends, a SIGKILL
    included: a killed holder's folder is free. Who holds it is written beside it (``HOLDER_FILE``: the command, its
    process id and host, since when) for the message a refused process gives, and removed when the block ends. The
    folder is made when it does not exist, and a record a killed writer left unrenamed is finished first
    (:func:`finish_partials`).

    Raises:
        BadInput: another process holds the folder; the message names the folder and the holder.
    """
    out.mkdir(parents=True, exist_ok=True)
    handle = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = _holder(out, os.O_RDONLY).read().strip() or "another process"
            except (OSError, BadInput):
                holder = "another process"
            raise BadInput(
                f"{out} is in use: {holder}. One process writes into a run folder at a time: wait for it to end, "
                "or train into another folder with output_dir=NEW"
            ) from None
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        # Made anew: a link of either kind planted there (or a killed holder's file) is removed, never written through.
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            (out / HOLDER_FILE).unlink()
        finish_partials(out)
        with _holder(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL) as holder:
            holder.write(f"{command}, process {os.getpid()} on {socket.gethostname()}, since {since}\n")
        try:
            yield
        finally:
            (out / HOLDER_FILE).unlink(missing_ok=True)
    finally:
        os.close(handle)  # the lock goes with the descriptor


def _holder(out: Path, flags: int) -> Any:
    """The run folder's holder file, opened without following a link or waiting on a pipe, as a text file.

    Raises:
        BadInput: something other than a regular file is there (a link, a pipe, a folder), naming it.
    """
    path = out / HOLDER_FILE
    try:
        handle = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EEXIST):
            raise BadInput(f"{path} is no regular file (a link, a folder or a pipe?): remove it") from None
        raise
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise BadInput(f"{path} is no regular file (a link, a folder or a pipe?): remove it")
    return os.fdopen(handle, "r" if flags == os.O_RDONLY else "w")


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all: written beside it, flushed to disk, then renamed over it, so a full
    disk or a killed process leaves the file as it was, never empty or cut.

    Raises:
        OSError: the write failed (the file as it was; the partial one removed).
    """
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "w") as written:
            written.write(text)
            written.flush()
            os.fsync(written.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def finish_partials(out: Path) -> None:
    """Finish or remove what :func:`write_whole` left in ``out`` when its process was killed between the write and
    the rename: a record (``.json``) that reads whole is renamed into place, the newest first; anything else (cut
    short, or a log the next resume rewrites) is removed."""
    done: set[Path] = set()
    for partial in sorted(out.glob(".*.partial"), key=lambda p: p.stat().st_mtime, reverse=True):
        target = out / partial.name[1:].rsplit(".", 2)[0]  # mkstemp's name: .NAME.RANDOM.partial
        try:
            whole = target.suffix == ".json" and isinstance(json.loads(partial.read_text()), dict)
        except (OSError, ValueError):
            whole = False
        with contextlib.suppress(OSError):
            if whole and target not in done:
                os.replace(partial, target)
                done.add(target)
            else:
                os.unlink(partial)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON into ``path``, whole (:func:`write_whole`)."""
    write_whole(path, json.dumps(data, indent=2, default=str) + "\n")


def training_output(out: Path) -> list[str]:
    """What in ``out`` a training run wrote (empty for a new folder, or one whose run stopped before training:
    refused by the spread gate, say)."""
    if not out.is_dir():
        return []
    found = [name for name in ("grading.jsonl", "completions", "trainer_state.json", "final") if (out / name).exists()]
    checkpoints = sorted(p.name for p in out.glob("checkpoint-*") if p.is_dir())
    return found + checkpoints[-1:]


def last_checkpoint(out: Path) -> tuple[Path, int] | None:
    """The newest whole ``checkpoint-N`` folder of a run and its step N (what TRL's ``resume_from_checkpoint``
    takes). transformers writes ``trainer_state.json`` last: a folder without it was cut short (Ctrl-C while it was
    being saved) and cannot be resumed from."""
    found = [
        (int(p.name.split("-", 1)[1]), p)
        for p in out.glob("checkpoint-*")
        if p.name.split("-", 1)[1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    if not found:
        return None
    step, path = max(found)
    return path, step


def finished_steps(out: Path, max_steps: int | None) -> tuple[int, int] | None:
    """``(steps trained, steps the run was to train)`` when the run in ``out`` finished and a resume would train
    nothing new, else None. A run is finished when ``whileai_run.json`` says so (or, when that record does not read,
    TRL's state saved beside ``final/`` at the run's end does) and it reached ``max_steps`` (the recipe's, when it
    sets one above 0; else the total TRL recorded, from the epochs)."""
    checkpoint = last_checkpoint(out)
    try:
        summary = json.loads((out / "whileai_run.json").read_text())
    except (OSError, ValueError):
        summary = None  # no record that reads (a full disk): TRL's own end of the run says it below
    if checkpoint is None:
        return None
    if isinstance(summary, dict) and summary.get("status") != "finished":
        return None
    # The run's end: the state TRL saved beside final/ (written only once it trained all it was to), else the record.
    ended = out / "trainer_state.json"
    if summary is None and not ((out / "final").is_dir() and ended.is_file()):
        return None
    try:
        state = json.loads((ended if summary is None else checkpoint[0] / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    target = max_steps if max_steps is not None and max_steps > 0 else state.get("max_steps")
    done = state.get("global_step", checkpoint[1])
    if isinstance(target, int) and isinstance(done, int) and target > 0 and done >= target:
        return done, target
    return None


def read_grading_log(path: Path, say: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The groups of a ``grading.jsonl``, in order.

    A last line cut short (the process was killed while writing it) is dropped, with a warning through ``say`` that
    names it; the group it held is graded again if its step is replayed. A bad line anywhere else is a ``BadInput``
    naming the file and line.
    """
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    groups = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                if say is not None:
                    say(f"whileai: {path} line {number} was cut short (a run killed while writing it): dropped")
                break
            raise BadInput(f"{path} line {number}: not valid JSON ({json_problem(error)})") from None
        if not isinstance(record, dict):
            raise BadInput(f"{path} line {number}: a graded group is a JSON object")
        groups.append(record)
    return groups


def forget_after(out: Path, step: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Drop what a run logged after step ``step``, before a resume from ``checkpoint-step`` replays it.

    ``grading.jsonl`` keeps the groups of steps 1..N (checkpoint-N has trained them, and its evaluation at step N ran
    before it was saved), ``watch.jsonl`` the checks of those steps, and TRL's completion logs of later steps are
    removed (``completions_NNNNN.parquet`` with NNNNN > N), so a second interruption leaves no stale rows for
    ``whileai spread`` or ``whileai report``.

    Returns:
        The groups kept, as records.
    """
    log = out / "grading.jsonl"
    groups = read_grading_log(log, say)
    kept = [g for g in groups if (g.get("step") or 0) <= step]
    dropped = len(groups) - len(kept)
    if log.is_file():
        write_whole(log, "".join(json.dumps(g) + "\n" for g in kept))
    for path in (out / "completions").glob("completions_*.parquet"):
        number = path.stem.rpartition("_")[2]
        if number.isdigit() and int(number) > step:
            path.unlink()
    watch = out / "watch.jsonl"
    if watch.is_file():  # the checks of the steps replayed run again
        checks = [line for line in watch.read_text().splitlines() if line.strip()]
        kept_checks = []
        for line in checks:
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept_checks.append(line)
            except ValueError:
                continue  # a last line cut short by a killed process
        write_whole(watch, "".join(line + "\n" for line in kept_checks))
    if dropped:
        say(f"whileai: {dropped} graded group(s) after step {step} will be graded again")
    return kept


def rebuild_record(out: Path, recipe: str, steps: int) -> None:
    """``whileai_run.json`` of a finished run written again from what its folder holds (TRL's state gave ``steps``,
    ``spread_gate.json`` the gate's verdict), for a record a killed process never renamed into place."""
    try:
        gate = json.loads((out / "spread_gate.json").read_text())
    except (OSError, ValueError):
        gate = None
    rebuilt = {"recipe": recipe, "status": "finished", "started": True, "steps": steps, "rebuilt": True}
    write_json(out / "whileai_run.json", {**rebuilt, "spread": gate if isinstance(gate, dict) else None})


def begin_record(out: Path, summary: dict[str, Any]) -> None:
    """``whileai_run.json`` as training starts (``status``: ``training``), so that a disk that fills later still has
    a record to rewrite (:func:`mark_run`); a finished run's record stays, as a failed attempt on it leaves it."""
    try:
        finished = json.loads((out / "whileai_run.json").read_text()).get("status") == "finished"
    except (OSError, ValueError, AttributeError):
        finished = False
    if not finished:
        write_json(out / "whileai_run.json", {**summary, "status": "training"})


def mark_run(out: Path, status: str, **fields: Any) -> None:
    """Record in ``whileai_run.json`` how a run ended when it did not finish (failed, interrupted).

    A run that finished keeps its record: an attempt that fails after it (a resume that could not start, say) is
    noted under ``last_attempt`` and never makes the finished run read as failed.
    """
    path = out / "whileai_run.json"
    if not out.is_dir():
        return
    try:
        summary = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        summary = {}
    if summary.get("status") == "finished":
        summary["last_attempt"] = {"status": status, **fields}
    else:
        summary.update(status=status, **fields)
    try:
        write_json(path, summary)
    except OSError:  # a full disk: the record training began with rewritten in the blocks it already holds
        text = json.dumps(summary, default=str) + "\n"
        with contextlib.suppress(OSError), path.open("r+") as record:
            if len(text.encode()) <= os.fstat(record.fileno()).st_blocks * 512:  # else a write cut short: keep it
                record.write(text)
                record.truncate()


# A disk that refuses a write: full, over a quota, or past the process's file size limit (ulimit -f).
_REFUSED = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def refused_write(out: Path, error: BaseException) -> str | None:
    """Why a run failed writing into ``out``, when it did: an ``OSError`` of a refused write anywhere behind
    ``error``, or any error while a checkpoint was being saved (torch's writer keeps no errno), named by its cause
    (the disk's free space, the file size limit); None for any other error."""
    chain: list[BaseException] = []
    while error is not None and len(chain) < 8:
        chain.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    refused = next((e.errno for e in chain if isinstance(e, OSError) and e.errno in _REFUSED), None)
    try:
        cut = [p for p in out.glob("checkpoint-*") if p.is_dir() and not (p / "trainer_state.json").is_file()]
        where = f"saving {max(cut, key=lambda p: p.stat().st_mtime).name}" if cut else "writing into it"
        free, limit = shutil.disk_usage(out).free, resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except OSError:  # the folder gone: nothing to tell from it, and the error stays the run's own
        return None
    again = "then continue with --resume"
    if (refused is not None or cut) and free < 64 * 2**20:
        return f"{where} failed: the disk is full ({free / 2**20:.0f} MB free); free space, {again}"
    if (refused is not None or cut) and limit != resource.RLIM_INFINITY:
        return f"{where} failed: this process may write files of {limit} bytes at most (ulimit -f); raise it, {again}"
    return None if refused is None else f"{where} failed: {os.strerror(refused)}; make room, {again}"


class GradingLog(WatchLog):
    """Appends each graded group to ``grading.jsonl`` (a resumed run continues the same file)."""

    def __call__(self, groups: list[Any], state: Any) -> None:  # type: ignore[override]
        with self.path.open("a") as handle:
            for group in groups:
                handle.write(json.dumps({"step": logged_step(state, group.phase), **group.as_dict()}) + "\n")


# What the spread gate reads: a resume whose recipe agrees with the run's on these sections keeps its verdict. The
# trainer's generation settings shape a gate on the initial model's completions, so they count there too.
_GATE_SECTIONS = ("grader", "grading", "spread", "simulate", "verifier", "model", "data")
_SAMPLE_FIELDS = ("max_completion_length", "temperature", "top_p", "top_k", "num_generations", "seed")


def recorded_gate(out: Path, recipe: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The spread gate's verdict a run folder keeps, for a resume of that run with ``recipe`` (its JSON dump).

    Returns:
        ``(gate, why)``: the verdict ``spread_gate.json`` holds, or ``None`` with why the gate runs again (no
        verdict recorded, or the recipe now reads differently from the run's ``recipe.yaml`` on a section the gate
        depends on).
    """
    path = out / "spread_gate.json"
    try:
        gate = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, "the run folder keeps no verdict"
    before = run_recipe(out)
    if not isinstance(gate, dict) or "verdict" not in gate or not isinstance(before, dict):
        return None, "the run folder keeps no verdict"
    changed = [name for name in _GATE_SECTIONS if _gate_part(name, before) != _gate_part(name, recipe)]
    if gate.get("source") == "sample":
        then, now = before.get("trainer") or {}, recipe.get("trainer") or {}
        changed += [f"trainer.{f}" for f in _SAMPLE_FIELDS if then.get(f) != now.get(f)]
    if changed:
        return None, f"the recipe's {', '.join(changed)} changed since the verdict"
    return gate, ""


def run_recipe(out: Path) -> dict[str, Any] | None:
    """The recipe a run folder keeps (``recipe.yaml``, as ``TrainSetup.written`` holds it), or None where it keeps
    none that reads as one."""
    try:
        recipe = read_yaml_file(out / "recipe.yaml")
    except BadInput:
        return None
    return recipe if isinstance(recipe, dict) else None


def arm_of(recipe: dict[str, Any]) -> dict[str, Any]:
    """What makes a run the arm it is, from a recipe as a run folder keeps it: a grader or none (binary), the
    grader's kind, the grading mode, the comparison arm's name."""
    grader = recipe.get("grader")
    return {
        "grader.kind": grader.get("kind") if isinstance(grader, dict) else None,
        "grading.mode": (recipe.get("grading") or {}).get("mode") if isinstance(grader, dict) else None,
        "comparison_arm": recipe.get("comparison_arm"),
    }


def arm_changes(out: Path, recipe: dict[str, Any]) -> list[str]:
    """What ``recipe`` (``TrainSetup.written``) changes of the arm the run in ``out`` was trained as, each as
    ``field: before -> now`` (a binary arm has no grader: ``none``); empty when it changes none, or the folder keeps
    no recipe."""
    before = run_recipe(out)
    if before is None:
        return []
    then, now = arm_of(before), arm_of(recipe)
    return [f"{key}: {then[key] or 'none'} -> {now[key] or 'none'}" for key in then if then[key] != now[key]]


def _gate_part(section: str, recipe: dict[str, Any]) -> Any:
    """What the gate reads of a recipe's section: all of it, but for the spread section's watch, which only acts
    during training (a resume with another watch keeps the verdict)."""
    value = recipe.get(section)
    if section == "spread" and isinstance(value, dict):
        return {key: item for key, item in value.items() if key != "watch"}
    return value
