"""Reading what whileai and TRL wrote: spread reports (``whileai spread --json``) and TRL run folders.

A TRL ``output_dir`` holds ``trainer_state.json`` (its ``log_history``: reward, reward_std, frac_reward_zero_std,
completion lengths and whileai's ``groupwise/*`` figures by step), possibly only inside ``checkpoint-*`` folders.
``load_report`` tells the two apart and returns plain data.

Pass rates come from TRL's completion logs (``completions/*.parquet``: ``whileai_reward`` > 0 passes). The
completions of a training step are drawn in groups of ``num_generations`` for one prompt each, so they are not
independent draws: a group shares its prompt's difficulty, and a pooled Wilson interval that counts every completion
as its own trial is too narrow. Every pass-rate interval here treats each group as a cluster
(``whileai.stats.clustered_interval``) and reports n as completions and groups; this module finds the groups, the
tasks and the windows, and ``whileai.stats`` does the arithmetic.

What this module does not do: format tables (the command line draws them), draw figures (``whileai.reports.plots``),
judge whether two runs differ by enough to matter, or compare arms over seeds (``whileai.reports.experiments``, which
reads its run folders with :func:`load_report`)."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from whileai.defaults import REPORT_WINDOW
from whileai.errors import BadInput, needs_extra
from whileai.stats import bootstrap_interval, clustered_interval, newcombe_difference, quantile

__all__ = [
    "INTERVAL_METHOD",
    "STEP_COLUMNS",
    "ArmComparison",
    "GradingFolder",
    "RunHistory",
    "SpreadFile",
    "StepPassRate",
    "compare_arms",
    "grading_summary",
    "load_report",
    "reports_data",
    "step_groups",
    "step_pass_rates",
    "window_summary",
]

# Said wherever a pass-rate interval is printed or written, so a reader knows what the interval assumes.
INTERVAL_METHOD = "95% Wilson interval on the design-effect-adjusted n, each group of completions a cluster"

# What ``whileai report`` reads, named in every "this is not one of them" message.
ACCEPTED = (
    "a report written by `whileai spread --json`, a TRL run folder (with trainer_state.json) or the grading folder of "
    "whileai's verl reward manager (with grading.jsonl)"
)

# The log_history keys shown per step, in order, with their column titles.
STEP_COLUMNS: dict[str, str] = {
    "reward": "reward",
    "whileai/pass_rate": "pass rate",
    "reward_std": "reward std",
    "frac_reward_zero_std": "zero-std share",  # a fraction of the groups: "groups" alone would read as a count
    "completions/mean_length": "length",
    "tools/call_frequency": "tool calls",
    "groupwise/mixed": "mixed",
    "groupwise/fallbacks": "fell back",
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
class GradingFolder:
    """The folder whileai's verl reward manager writes: ``grading.jsonl`` and its figures, ``whileai_verl.json``
    (verl keeps the training history itself)."""

    path: Path
    figures: dict[str, Any] = field(default_factory=dict)


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
        return json.loads(path.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        if path.name != "trainer_state.json":
            raise BadInput(f"{path}: not a JSON file; whileai report reads {ACCEPTED}") from None
        where = f" line {err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
        raise BadInput(f"{path}{where}: not valid JSON; a run cut short?") from None
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror})") from None


def load_report(path: str | Path) -> SpreadFile | RunHistory | GradingFolder:
    """A spread report file, a TRL run folder, or a verl run's grading folder.

    Raises:
        BadInput: a path that is neither; the one-line message names the path and what ``whileai report`` reads.
    """
    target = Path(path)
    if target.is_file():
        data = _read_json(target)
        if isinstance(data, dict) and "verdict" in data and "summary" in data:
            return SpreadFile(target, data)
        if isinstance(data, dict) and "log_history" in data:
            return _history(target.parent, target, data)
        raise BadInput(f"{target}: neither a spread report nor a trainer_state.json; whileai report reads {ACCEPTED}")
    if target.is_dir():
        state = _state_file(target)
        if state is None and (target / "grading.jsonl").is_file():
            summary = target / "whileai_verl.json"
            figures = _read_json(summary) if summary.is_file() else {}
            return GradingFolder(target, figures if isinstance(figures, dict) else {})
        if state is None:
            raise BadInput(
                f"{target}: no trainer_state.json here or in a checkpoint-* folder; whileai report reads {ACCEPTED}"
            )
        return _history(target, state, _read_json(state))
    raise BadInput(f"{target}: no such file or folder; whileai report reads {ACCEPTED}")


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
    gate = folder / "spread_gate.json"
    if isinstance(extra, dict) and "spread" not in extra and gate.is_file():  # a record lost: the gate's own file
        with contextlib.suppress(BadInput):
            extra["spread"] = _read_json(gate)
    return RunHistory(folder, state_file, steps, extra)


# ---------------------------------------------------------------- pass rates of completions drawn in groups


@dataclass(frozen=True)
class StepPassRate:
    """The verifier's pass rate at one step, from TRL's completion logs, with its 95% interval over the step's
    groups (:func:`~whileai.stats.clustered_interval`)."""

    step: int
    passes: int
    n: int
    low: float
    high: float
    groups: int = 0
    design_effect: float = 1.0

    @property
    def rate(self) -> float:
        return self.passes / self.n if self.n else math.nan


def _completion_logs(folder: Path) -> list[Path]:
    return sorted((folder / "completions").glob("completions_*.parquet"))


def _read_completions(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    with needs_extra("parquet", "reading a run's completion logs"):
        import pyarrow.parquet as pq
    table = pq.ParquetFile(path)
    present = [c for c in columns if c in table.schema_arrow.names]
    return table.read(columns=present).to_pylist()


def _scored(row: dict[str, Any]) -> bool:
    """A completion the verifier scored: its logged reward is a number, not None or the NaN of "unscorable"."""
    reward = row.get("whileai_reward")
    return reward is not None and reward == reward


def _task_of(row: dict[str, Any]) -> str:
    prompt = row.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def step_groups(folder: Path, unscored: dict[int, int] | None = None) -> dict[int, list[tuple[int, int]]]:
    """Per logged step, ``(passes, completions)`` of each group, in the order the groups were logged; ``unscored``,
    when given, gets each step's count of completions the verifier left unscored (a NaN or None reward).

    A group is what whileai logged as ``whileai_group`` (``"step:index"``, so two groups of one prompt stay two);
    logs without it are grouped by prompt, which merges such groups into one (a wider interval, never a narrower).
    """
    steps: dict[int, list[tuple[int, int]]] = {}
    for path in _completion_logs(folder):
        rows = _read_completions(path, ["step", "prompt", "whileai_group", "whileai_reward"])
        counts: dict[str, list[int]] = {}
        for row in rows:
            if not _scored(row):
                if unscored is not None:
                    step = int(row.get("step") or 0)
                    unscored[step] = unscored.get(step, 0) + 1
                continue
            key = row.get("whileai_group") or _task_of(row)
            count = counts.setdefault(str(key), [0, 0])
            count[0] += row["whileai_reward"] > 0
            count[1] += 1
        if counts:
            step = int(rows[0].get("step") or 0)
            steps.setdefault(step, []).extend((y, m) for y, m in counts.values())
    return steps


def step_pass_rates(folder: Path) -> list[StepPassRate]:
    """Per logged step: passes and n of the verifier's reward (``whileai_reward`` > 0), with a 95% interval that
    treats each of the step's groups as a cluster (:func:`~whileai.stats.clustered_interval`)."""
    rates = []
    for step, groups in sorted(step_groups(folder).items()):
        rate = clustered_interval(groups)
        rates.append(StepPassRate(step, rate.passes, rate.n, rate.low, rate.high, rate.groups, rate.design_effect))
    return rates


def window_summary(run: RunHistory, window: int) -> dict[str, Any]:
    """The pass rate and mean completion length over a run's first and last ``window`` logged steps.

    The steps are those of the completion logs (the same ones :func:`compare_arms` reads), else those of the log
    history. The pass rate pools the window's completions with :func:`~whileai.stats.clustered_interval` over all its
    groups; the length is the mean of TRL's ``completions/mean_length`` (tokens) over the window's logged steps. A
    run with no more than ``window`` steps has one window (``last`` is ``first``); the two windows never overlap (a
    run shorter than two windows is split in halves: 4 steps with a window of 3 compare steps 1-2 with 3-4).

    Returns:
        ``{"window", "steps", "interval", "first", "last"}``; each window is ``{"steps": [from, to], "pass_rate":
        whileai.stats.ClusteredRate.as_dict() or None, "logged_pass_rate": mean of whileai/pass_rate or None,
        "mean_length": tokens or None, "unscored": completions the verifier left unscored}``; ``first`` and ``last``
        are None for a run with no logged step.
    """
    if window < 1:
        raise BadInput(f"--window must be at least 1, got {window}")
    unscored: dict[int, int] = {}
    groups = step_groups(run.path, unscored)
    steps = sorted({*groups, *unscored}) or sorted({int(row["step"]) for row in run.steps})

    def summarize(chosen: list[int]) -> dict[str, Any]:
        span = (chosen[0], chosen[-1])
        rows = [row for row in run.steps if span[0] <= row["step"] <= span[1]]
        pooled = [g for step in chosen for g in groups.get(step, [])]
        lengths = [row["completions/mean_length"] for row in rows if "completions/mean_length" in row]
        logged = [row["whileai/pass_rate"] for row in rows if "whileai/pass_rate" in row]
        return {
            "steps": list(span),
            "pass_rate": clustered_interval(pooled).as_dict() if pooled else None,
            "logged_pass_rate": sum(logged) / len(logged) if logged else None,
            "mean_length": sum(lengths) / len(lengths) if lengths else None,
            "unscored": sum(unscored.get(step, 0) for step in chosen),
        }

    # The two windows never share a step: a run shorter than two windows is split in halves.
    size = min(window, len(steps) // 2) if len(steps) > window else window
    first = summarize(steps[:size]) if steps else None
    last = summarize(steps[-size:]) if len(steps) > window else first
    return {"window": window, "steps": len(steps), "interval": INTERVAL_METHOD, "first": first, "last": last}


def final_tasks(folder: Path, window: int) -> dict[str, tuple[int, int]]:
    """(passes, n) per task over the last ``window`` logged steps."""
    per_task: dict[str, tuple[int, int]] = {}
    for path in _completion_logs(folder)[-window:]:
        for row in _read_completions(path, ["prompt", "whileai_reward"]):
            if not _scored(row):
                continue
            passes, n = per_task.get(_task_of(row), (0, 0))
            per_task[_task_of(row)] = (passes + (row["whileai_reward"] > 0), n + 1)
    return per_task


# ---------------------------------------------------------------- the grader's figures and two arms compared


def grading_summary(folder: Path, say: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The grader's figures from ``grading.jsonl``: groups, mixed, calls, fallbacks by kind, hacks, factors (how many,
    their mean and std; the mean and std are None when nothing was ranked), latency (p50 and p95 by
    :func:`~whileai.stats.quantile`). None when the run had no grader. A last line cut short (a killed run) is
    dropped, with a warning through ``say``."""
    from whileai.training.folder import read_grading_log

    path = folder / "grading.jsonl"
    if not path.is_file():
        return None
    groups = mixed = graded = hacks = 0
    fallbacks: dict[str, int] = {}
    scores: list[float] = []
    seconds: list[float] = []
    for group in read_grading_log(path, say):
        groups += 1
        passed = [ok for ok, r in zip(group.get("passed", []), group.get("rewards", []), strict=False) if r == r]
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
    return {
        "groups": groups,
        "mixed": mixed,
        "graded": graded,
        "fallbacks": fallbacks,
        "hacks_zeroed": hacks,
        "factors": len(scores),
        "factor_mean": mean,
        "factor_std": std,
        "latency_p50_s": quantile(seconds, 0.50) if seconds else None,
        "latency_p95_s": quantile(seconds, 0.95) if seconds else None,
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


def compare_arms(a: Path, b: Path, window: int = REPORT_WINDOW) -> ArmComparison | None:
    """Final pass rate of ``b`` minus ``a`` over the last ``window`` logged steps.

    Paired by task when the runs share tasks (mean of per-task differences, :func:`~whileai.stats.bootstrap_interval`
    over tasks); otherwise the difference of two proportions, :func:`~whileai.stats.newcombe_difference` of each
    arm's :func:`~whileai.stats.clustered_interval` (groups as clusters).
    """
    tasks_a, tasks_b = final_tasks(a, window), final_tasks(b, window)
    return task_difference(tasks_a, tasks_b, _last_groups(a, window), _last_groups(b, window))


def task_difference(
    tasks_a: dict[str, tuple[int, int]],
    tasks_b: dict[str, tuple[int, int]],
    groups_a: list[tuple[int, int]],
    groups_b: list[tuple[int, int]],
) -> ArmComparison | None:
    """Pass rate of ``b`` minus ``a`` from (passes, n) per task, paired when they share two tasks or more, else from
    each arm's groups as clusters (:func:`compare_arms` says how); None when an arm has nothing."""
    if not tasks_a or not tasks_b:
        return None
    n_a, n_b = sum(n for _, n in tasks_a.values()), sum(n for _, n in tasks_b.values())
    shared = sorted(set(tasks_a) & set(tasks_b))
    if len(shared) >= 2:
        diffs = [tasks_b[t][0] / tasks_b[t][1] - tasks_a[t][0] / tasks_a[t][1] for t in shared]
        low, high = bootstrap_interval(diffs)
        return ArmComparison(sum(diffs) / len(diffs), low, high, True, len(shared), n_a, n_b)
    rate_a, rate_b = clustered_interval(groups_a), clustered_interval(groups_b)
    difference, low, high = newcombe_difference(
        (rate_a.rate, rate_a.low, rate_a.high), (rate_b.rate, rate_b.low, rate_b.high)
    )
    return ArmComparison(difference, low, high, False, 0, n_a, n_b)


def held_out_difference(a: dict[str, Any], b: dict[str, Any]) -> ArmComparison | None:
    """The held-out pass rate of ``b`` minus ``a`` (two ``eval.json``), paired by prompt when they share prompts."""
    tasks: list[dict[str, tuple[int, int]]] = [{}, {}]
    groups: list[list[tuple[int, int]]] = [[], []]
    for side, data in enumerate((a, b)):
        for row in data.get("per_prompt", []):
            passes, n = tasks[side].get(row["prompt"], (0, 0))  # a prompt asked twice counts once, both groups in it
            tasks[side][row["prompt"]] = (passes + row["passes"], n + row["n"])
            groups[side].append((row["passes"], row["n"]))
    return task_difference(tasks[0], tasks[1], groups[0], groups[1])


def _last_groups(folder: Path, window: int) -> list[tuple[int, int]]:
    groups = step_groups(folder)
    return [g for step in sorted(groups)[-window:] for g in groups[step]]


def watch_checks(folder: Path) -> list[dict[str, Any]] | None:
    """The spread watch's checks of a run (``watch.jsonl``, one per check), or None where it kept none. A last line
    cut short by a killed run is left out."""
    path = folder / "watch.jsonl"
    if not path.is_file():
        return None
    checks = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "step" in record:
            checks.append(record)
    return checks


def held_out_summary(folder: Path, checkpoint: str | None = None) -> dict[str, Any] | None:
    """What ``whileai eval`` measured on the run's final model (``eval.json``; ``checkpoint="initial"``: the model it
    started from, ``eval-initial.json``), or None where it has not run. ``stale`` says whether the run trained on
    after it: the steps the evaluated model had are fewer than the run's now (None where the file does not say)."""
    from whileai.training.folder import EVAL_FORMAT, eval_file

    path = eval_file(folder, checkpoint)
    if not path.is_file():
        return None
    data = _read_json(path)
    if not isinstance(data, dict) or data.get("format") != EVAL_FORMAT:
        raise BadInput(f"{path}: not a whileai eval file ({EVAL_FORMAT})")
    if checkpoint is None:
        evaluated, now = data.get("trained_steps"), _global_step(folder)
        data["stale"] = None if evaluated is None or now is None else now > evaluated
        data["run_steps"] = now
    return data


def _global_step(folder: Path) -> int | None:
    state = _read_json(folder / "trainer_state.json") if (folder / "trainer_state.json").is_file() else None
    step = state.get("global_step") if isinstance(state, dict) else None
    return step if isinstance(step, int) else None


def reports_data(loaded: list[Any], window: int, say: Callable[[str], None]) -> dict[str, Any]:
    """What ``whileai report`` shows of ``loaded`` (what :func:`load_report` read), as JSON-ready data: each report's
    entry (a run's pass rates by step with their intervals, its window summary and grader figures; a grading
    folder's figures; a spread report as it is) and, for two runs, ``comparison`` (:func:`compare_arms`)."""
    data: dict[str, Any] = {"reports": []}
    for item in loaded:
        if isinstance(item, GradingFolder):
            entry = {"path": str(item.path), "kind": "grading", "grader": grading_summary(item.path, say)}
            entry["figures"] = item.figures
            entry["watch"] = watch_checks(item.path)
        elif isinstance(item, RunHistory):
            rates = [{**asdict(r), "rate": r.rate} for r in step_pass_rates(item.path)]
            entry = {
                "path": str(item.path),
                "kind": "run",
                "steps": item.steps,
                "pass_rates": rates,
                "interval": INTERVAL_METHOD,
                "summary": window_summary(item, window),
                "grader": grading_summary(item.path, say),
                "run": item.extra,
                "held_out": held_out_summary(item.path),
                "held_out_initial": held_out_summary(item.path, "initial"),
                "watch": watch_checks(item.path),
            }
        else:
            entry = {"path": str(item.path), "kind": "spread", "report": item.data}
        data["reports"].append(entry)
    runs = [item for item in loaded if isinstance(item, RunHistory)]
    comparison = compare_arms(runs[0].path, runs[1].path, window) if len(runs) == 2 else None
    if comparison is not None:
        data["comparison"] = {
            "a": str(runs[0].path),
            "b": str(runs[1].path),
            "window": window,
            **asdict(comparison),
            "text": str(comparison),
        }
    held_out = [held_out_summary(run.path) for run in runs] if len(runs) == 2 else []
    if len(held_out) == 2 and held_out[0] is not None and held_out[1] is not None:
        difference = held_out_difference(held_out[0], held_out[1])
        if difference is not None:
            data["held_out_comparison"] = {"a": str(runs[0].path), "b": str(runs[1].path), **asdict(difference)}
            data["held_out_comparison"]["text"] = str(difference)
    return data
