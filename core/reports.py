"""Reading what whileai and TRL wrote: spread reports (``whileai spread --json``) and TRL run folders.

A TRL ``output_dir`` holds ``trainer_state.json`` (its ``log_history``: reward, reward_std, frac_reward_zero_std,
completion lengths and whileai's ``groupwise/*`` figures by step), possibly only inside ``checkpoint-*`` folders.
``load_report`` tells the two apart and returns plain data; it formats nothing (the command line draws the tables).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.errors import BadInput

__all__ = ["RunHistory", "SpreadFile", "load_report"]

# The log_history keys shown per step, in order, with their column titles.
STEP_COLUMNS: dict[str, str] = {
    "reward": "reward",
    "reward_std": "reward std",
    "frac_reward_zero_std": "zero-std groups",
    "completions/mean_length": "length",
    "groupwise/mixed": "mixed",
    "groupwise/fallbacks": "fallbacks",
    "groupwise/hacks_zeroed": "hacks",
    "groupwise/score_mean": "factor mean",
    "groupwise/score_std": "factor std",
}


@dataclass
class SpreadFile:
    """A spread report written by ``whileai spread --json``."""

    path: Path
    data: dict[str, Any]


@dataclass
class RunHistory:
    """A TRL run folder: the per-step rows of its log history."""

    path: Path
    state_file: Path
    steps: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        present = {k for row in self.steps for k in row}
        return [k for k in STEP_COLUMNS if k in present]


def _state_file(folder: Path) -> Path | None:
    direct = folder / "trainer_state.json"
    if direct.is_file():
        return direct
    checkpoints = sorted(
        (p for p in folder.glob("checkpoint-*/trainer_state.json")),
        key=lambda p: int(p.parent.name.rpartition("-")[2] or 0) if p.parent.name.rpartition("-")[2].isdigit() else 0,
    )
    return checkpoints[-1] if checkpoints else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise BadInput(f"{path} line {err.lineno}: not valid JSON ({err.msg})") from None
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror})") from None


def load_report(path: str | Path) -> SpreadFile | RunHistory:
    """A spread report file or a TRL run folder.

    Raises:
        BadInput: a path that is neither (the message says what was expected).
    """
    target = Path(path)
    if target.is_file():
        data = _read_json(target)
        if isinstance(data, dict) and "verdict" in data and "summary" in data:
            return SpreadFile(target, data)
        if isinstance(data, dict) and "log_history" in data:
            return _history(target.parent, target, data)
        raise BadInput(f"{target}: neither a spread report (whileai spread --json) nor a trainer_state.json")
    if target.is_dir():
        state = _state_file(target)
        if state is None:
            raise BadInput(f"{target}: no trainer_state.json here or in a checkpoint-* folder")
        return _history(target, state, _read_json(state))
    raise BadInput(f"{target}: no such file or folder")


def _history(folder: Path, state_file: Path, data: dict[str, Any]) -> RunHistory:
    steps = []
    for entry in data.get("log_history", []):
        if not isinstance(entry, dict) or "step" not in entry:
            continue
        if not any(key in entry for key in STEP_COLUMNS):
            continue  # the final train summary (train_runtime, ...) and eval rows
        steps.append({k: v for k, v in entry.items() if isinstance(v, (int, float))})
    extra = {}
    summary = folder / "whileai_run.json"
    if summary.is_file():
        extra = _read_json(summary)
    return RunHistory(folder, state_file, steps, extra)
