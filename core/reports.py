"""Reading what whileai and TRL wrote: spread reports (``whileai spread --json``) and TRL run folders.

A TRL ``output_dir`` holds ``trainer_state.json`` (its ``log_history``: reward, reward_std, frac_reward_zero_std,
completion lengths and whileai's ``groupwise/*`` figures by step), possibly only inside ``checkpoint-*`` folders.
``load_report`` tells the two apart and returns plain data; it formats nothing (the command line draws the tables).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, MissingExtra

__all__ = [
    "ArmComparison",
    "RunHistory",
    "SpreadFile",
    "StepPassRate",
    "compare_arms",
    "grading_summary",
    "load_report",
    "plot_runs",
    "step_pass_rates",
]

# The log_history keys shown per step, in order, with their column titles.
STEP_COLUMNS: dict[str, str] = {
    "reward": "reward",
    "whileai/pass_rate": "pass rate",
    "reward_std": "reward std",
    "frac_reward_zero_std": "zero-std groups",
    "completions/mean_length": "length",
    "tools/call_frequency": "tool calls",
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


# ---------------------------------------------------------------- training runs: pass rates, grader, comparisons


@dataclass(frozen=True)
class StepPassRate:
    """The verifier's pass rate at one step, from TRL's completion logs, with its Wilson interval."""

    step: int
    passes: int
    n: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.passes / self.n if self.n else math.nan


def _completion_logs(folder: Path) -> list[Path]:
    return sorted((folder / "completions").glob("completions_*.parquet"))


def _read_completions(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra("pyarrow", "parquet", "reading a run's completion logs") from None
    table = pq.ParquetFile(path)
    present = [c for c in columns if c in table.schema_arrow.names]
    return table.read(columns=present).to_pylist()


def _task_of(row: dict[str, Any]) -> str:
    prompt = row.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def step_pass_rates(folder: Path) -> list[StepPassRate]:
    """Per logged step: passes and n of the verifier's reward (``whileai_reward`` > 0) with a 95% Wilson interval."""
    from whileai.simulations.passrate import wilson_interval

    rates = []
    for path in _completion_logs(folder):
        rows = _read_completions(path, ["step", "whileai_reward"])
        rewards = [r["whileai_reward"] for r in rows if r.get("whileai_reward") is not None]
        if not rewards:
            continue
        passes = sum(1 for r in rewards if r > 0)
        low, high = wilson_interval(passes, len(rewards))
        rates.append(StepPassRate(int(rows[0].get("step") or 0), passes, len(rewards), low, high))
    return rates


def final_tasks(folder: Path, window: int) -> dict[str, tuple[int, int]]:
    """(passes, n) per task over the last ``window`` logged steps."""
    per_task: dict[str, tuple[int, int]] = {}
    for path in _completion_logs(folder)[-window:]:
        for row in _read_completions(path, ["prompt", "whileai_reward"]):
            if row.get("whileai_reward") is None:
                continue
            passes, n = per_task.get(_task_of(row), (0, 0))
            per_task[_task_of(row)] = (passes + (row["whileai_reward"] > 0), n + 1)
    return per_task


def grading_summary(folder: Path) -> dict[str, Any] | None:
    """The grader's figures from ``grading.jsonl``: groups, mixed, calls, fallbacks by kind, hacks, factors,
    latency. None when the run had no grader."""
    path = folder / "grading.jsonl"
    if not path.is_file():
        return None
    groups = mixed = graded = hacks = 0
    fallbacks: dict[str, int] = {}
    scores: list[float] = []
    seconds: list[float] = []
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                group = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadInput(f"{path} line {number}: not valid JSON ({err.msg}); a run cut short?") from None
            groups += 1
            passed = group.get("passed", [])
            mixed += bool(passed) and any(passed) and not all(passed)
            graded += bool(group.get("graded")) or bool(group.get("reason"))
            reason = group.get("reason")
            if reason:
                kind = group.get("failure") or reason.split(":", 1)[0]  # older logs have no "failure"
                fallbacks[kind] = fallbacks.get(kind, 0) + 1
            else:
                hacks += len(group.get("hacks", []))
                scores.extend(group.get("scores", []))
            if group.get("graded") or reason:
                seconds.append(float(group.get("seconds", 0.0)))
    mean = sum(scores) / len(scores) if scores else None
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores)) if scores and mean is not None else None
    seconds.sort()

    def pct(q: float) -> float | None:
        return seconds[min(len(seconds) - 1, int(q * len(seconds)))] if seconds else None

    return {
        "groups": groups,
        "mixed": mixed,
        "graded": graded,
        "fallbacks": fallbacks,
        "hacks_zeroed": hacks,
        "factor_mean": mean,
        "factor_std": std,
        "latency_p50_s": pct(0.5),
        "latency_p95_s": pct(0.95),
    }


@dataclass(frozen=True)
class ArmComparison:
    """The difference in final pass rate between two runs (b - a), in points, with a 95% interval."""

    difference: float
    low: float
    high: float
    paired: bool
    tasks: int
    n_a: int
    n_b: int

    def __str__(self) -> str:
        how = f"paired over {self.tasks} tasks" if self.paired else f"unpaired, n={self.n_a} and {self.n_b}"
        return (
            f"{self.difference * 100:+.1f} points, 95% {self.low * 100:+.1f} to {self.high * 100:+.1f} ({how})"
        ).replace("-", "\u2212")


def compare_arms(a: Path, b: Path, window: int = 3) -> ArmComparison | None:
    """Final pass rate of ``b`` minus ``a`` over the last ``window`` logged steps.

    Paired by task when the runs share tasks (mean of per-task differences, bootstrap over tasks); otherwise the
    difference of two proportions with a Newcombe (Wilson-based) interval.
    """
    from whileai.simulations.passrate import bootstrap_interval, wilson_interval

    tasks_a, tasks_b = final_tasks(a, window), final_tasks(b, window)
    if not tasks_a or not tasks_b:
        return None
    n_a, n_b = sum(n for _, n in tasks_a.values()), sum(n for _, n in tasks_b.values())
    shared = sorted(set(tasks_a) & set(tasks_b))
    if len(shared) >= 2:
        diffs = [tasks_b[t][0] / tasks_b[t][1] - tasks_a[t][0] / tasks_a[t][1] for t in shared]
        low, high = bootstrap_interval(diffs)
        return ArmComparison(sum(diffs) / len(diffs), low, high, True, len(shared), n_a, n_b)
    p_a = sum(p for p, _ in tasks_a.values()) / n_a
    p_b = sum(p for p, _ in tasks_b.values()) / n_b
    low_a, high_a = wilson_interval(round(p_a * n_a), n_a)
    low_b, high_b = wilson_interval(round(p_b * n_b), n_b)
    difference = p_b - p_a
    low = difference - math.sqrt((p_b - low_b) ** 2 + (high_a - p_a) ** 2)
    high = difference + math.sqrt((high_b - p_b) ** 2 + (p_a - low_a) ** 2)
    return ArmComparison(difference, low, high, False, 0, n_a, n_b)


def plot_runs(runs: list[RunHistory], path: Path) -> Path:
    """Pass rate, completion length and turns against step for each run, as a PNG (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("matplotlib", "plot", "report --plot") from None
    panels = [("pass rate", None), ("completion length", "completions/mean_length")]
    if any("tools/call_frequency" in row for run in runs for row in run.steps):
        panels.append(("tool calls per completion", "tools/call_frequency"))
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for run in runs:
        label = run.path.name
        rates = step_pass_rates(run.path)
        if rates:
            xs = [r.step for r in rates]
            axes[0][0].plot(xs, [r.rate for r in rates], label=label)
            axes[0][0].fill_between(xs, [r.low for r in rates], [r.high for r in rates], alpha=0.2)
        for column, (_, key) in enumerate(panels[1:], start=1):
            points = [(row["step"], row[key]) for row in run.steps if key in row]
            if points:
                axes[0][column].plot(*zip(*points, strict=True), label=label)
    for column, (title, _) in enumerate(panels):
        axes[0][column].set_title(title)
        axes[0][column].set_xlabel("step")
    axes[0][0].legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
