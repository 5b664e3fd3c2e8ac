"""Reading what whileai and TRL wrote: spread reports (``whileai spread --json``) and TRL run folders.

A TRL ``output_dir`` holds ``trainer_state.json`` (its ``log_history``: reward, reward_std, frac_reward_zero_std,
completion lengths and whileai's ``groupwise/*`` figures by step), possibly only inside ``checkpoint-*`` folders.
``load_report`` tells the two apart and returns plain data; it formats nothing (the command line draws the tables).

Pass rates come from TRL's completion logs (``completions/*.parquet``: ``whileai_reward`` > 0 passes). The
completions of a training step are drawn in groups of ``num_generations`` for one prompt each, so they are not
independent draws: a group shares its prompt's difficulty, and a pooled Wilson interval that counts every completion
as its own trial is too narrow. Every pass-rate interval here treats each group as a cluster
(:func:`clustered_interval`: Wilson's interval on the design-effect-adjusted effective sample size, with the
small-sample correction of Korn and Graubard 1998) and reports n as completions and groups.

What this module does not do: draw tables or judge whether two runs differ by enough to matter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.errors import BadInput, MissingExtra

__all__ = [
    "INTERVAL_METHOD",
    "ArmComparison",
    "ClusteredRate",
    "RunHistory",
    "SpreadFile",
    "StepPassRate",
    "clustered_interval",
    "compare_arms",
    "grading_summary",
    "load_report",
    "plot_runs",
    "step_groups",
    "step_pass_rates",
    "t_quantile",
    "window_summary",
]

# Said wherever a pass-rate interval is printed or written, so a reader knows what the interval assumes.
INTERVAL_METHOD = "95% Wilson interval on the design-effect-adjusted n, each group of completions a cluster"

# What ``whileai report`` reads, named in every "this is not one of them" message.
ACCEPTED = "a report written by `whileai spread --json` or a TRL run folder (with trainer_state.json)"

# The log_history keys shown per step, in order, with their column titles.
STEP_COLUMNS: dict[str, str] = {
    "reward": "reward",
    "whileai/pass_rate": "pass rate",
    "reward_std": "reward std",
    "frac_reward_zero_std": "zero-std groups",
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


def load_report(path: str | Path) -> SpreadFile | RunHistory:
    """A spread report file or a TRL run folder.

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
    return RunHistory(folder, state_file, steps, extra)


# ---------------------------------------------------------------- pass rates of completions drawn in groups


def t_quantile(q: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher expansion of Abramowitz
    and Stegun (1964, 26.7.5), within 0.005 of the exact value from 3 degrees of freedom on at q = 0.975."""
    if df == 1:
        return math.tan(math.pi * (q - 0.5))
    if df == 2:
        return (2 * q - 1) / math.sqrt(2 * q * (1 - q))
    from statistics import NormalDist

    z = NormalDist().inv_cdf(q)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@dataclass(frozen=True)
class ClusteredRate:
    """Passes among ``n`` completions drawn in ``groups`` groups, with a 95% interval that treats each group as a
    cluster (:func:`clustered_interval`)."""

    passes: int
    n: int
    groups: int
    low: float
    high: float
    design_effect: float

    @property
    def rate(self) -> float:
        return self.passes / self.n if self.n else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "n": self.n,
            "groups": self.groups,
            "rate": self.rate,
            "low": self.low,
            "high": self.high,
            "design_effect": self.design_effect,
        }


def clustered_interval(groups: list[tuple[int, int]], confidence: float = 0.95) -> ClusteredRate:
    """The pass rate of completions drawn in groups, with an interval that counts each group as a cluster.

    The completions of one group answer one prompt, so they pass or fail together more often than independent draws
    would. With ``k`` groups, ``y_i`` passes among ``m_i`` completions in group ``i``, ``n = sum m_i`` and
    ``p = sum y_i / n``:

    - the variance of ``p`` over clusters (the linearized variance of a ratio estimator, Cochran 1977, Sampling
      Techniques, chapter 6, with the k/(k-1) small-sample factor): ``V = k/(k-1) * sum (y_i - p m_i)^2 / n^2``;
    - the design effect ``deff = V / (p (1 - p) / n)``, at least 1 (an estimate below 1 from a few groups is noise);
      1 when ``p`` is 0 or 1, where V says nothing (Korn and Graubard 1998);
    - the effective sample size ``n / deff``, shrunk by ``(z / t_{k-1})^2`` so that few groups widen the interval as
      a t interval would (Korn and Graubard 1998, "Confidence intervals for proportions with small expected number
      of positive counts estimated from survey data", Survey Methodology 24(2));
    - Wilson's interval at ``p`` on that effective n (Wilson's formula holds for a non-integer n; Korn and Graubard
      use Clopper-Pearson's, Dean and Pagano 2015 compare both on clustered surveys).

    With one group there is no between-group variance to estimate: the group counts as one draw (n_eff = 1), the
    widest the design allows. With independent draws (groups of one) the design effect is about 1 and the interval
    is close to Wilson's on all n.

    Args:
        groups: ``(passes, completions)`` per group, e.g. ``[(3, 8), (0, 8), (8, 8)]``.
        confidence: the interval's nominal coverage.

    Returns:
        a :class:`ClusteredRate`; with no completions the rate is NaN and the interval ``(0, 1)``.

    Example:
        >>> r = clustered_interval([(8, 8), (0, 8), (8, 8), (0, 8)])
        >>> r.rate, r.n, r.groups, round(r.design_effect, 2)
        (0.5, 32, 4, 10.67)
        >>> from whileai.simulations.passrate import wilson_interval
        >>> r.high - r.low > (lambda lo, hi: hi - lo)(*wilson_interval(16, 32))
        True
    """
    from statistics import NormalDist

    from whileai.simulations.passrate import wilson_interval

    groups = [(int(y), int(m)) for y, m in groups if m > 0]
    k = len(groups)
    n = sum(m for _, m in groups)
    passes = sum(y for y, _ in groups)
    if n == 0:
        return ClusteredRate(0, 0, 0, 0.0, 1.0, 1.0)
    p = passes / n
    if k == 1:
        effective, deff = 1.0, float(n)
    else:
        deff = 1.0
        if 0 < p < 1:
            variance = k / (k - 1) * sum((y - p * m) ** 2 for y, m in groups) / n**2
            deff = max(1.0, variance / (p * (1 - p) / n))
        quantile = 0.5 + confidence / 2
        effective = n / deff * (NormalDist().inv_cdf(quantile) / t_quantile(quantile, k - 1)) ** 2
    low, high = wilson_interval(p * effective, effective, confidence)  # type: ignore[arg-type]
    return ClusteredRate(passes, n, k, low, high, deff)


@dataclass(frozen=True)
class StepPassRate:
    """The verifier's pass rate at one step, from TRL's completion logs, with its 95% interval over the step's
    groups (:func:`clustered_interval`)."""

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
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra("pyarrow", "parquet", "reading a run's completion logs") from None
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


def step_groups(folder: Path) -> dict[int, list[tuple[int, int]]]:
    """Per logged step, ``(passes, completions)`` of each group, in the order the groups were logged.

    A group is what whileai logged as ``whileai_group`` (``"step:index"``, so two groups of one prompt stay two);
    logs without it are grouped by prompt, which merges such groups into one (a wider interval, never a narrower).
    """
    steps: dict[int, list[tuple[int, int]]] = {}
    for path in _completion_logs(folder):
        rows = _read_completions(path, ["step", "prompt", "whileai_group", "whileai_reward"])
        counts: dict[str, list[int]] = {}
        for row in rows:
            if not _scored(row):
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
    treats each of the step's groups as a cluster (:func:`clustered_interval`)."""
    rates = []
    for step, groups in sorted(step_groups(folder).items()):
        rate = clustered_interval(groups)
        rates.append(StepPassRate(step, rate.passes, rate.n, rate.low, rate.high, rate.groups, rate.design_effect))
    return rates


def window_summary(run: RunHistory, window: int) -> dict[str, Any]:
    """The pass rate and mean completion length over a run's first and last ``window`` logged steps.

    The steps are those of the completion logs (the same ones :func:`compare_arms` reads), else those of the log
    history. The pass rate pools the window's completions with :func:`clustered_interval` over all its groups; the
    length is the mean of TRL's ``completions/mean_length`` (tokens) over the window's logged steps. A run with no
    more than ``window`` steps has one window (``last`` is ``first``).

    Returns:
        ``{"window", "steps", "interval", "first", "last"}``; each window is ``{"steps": [from, to], "pass_rate":
        ClusteredRate.as_dict() or None, "logged_pass_rate": mean of whileai/pass_rate or None, "mean_length":
        tokens or None}``; ``first`` and ``last`` are None for a run with no logged step.
    """
    if window < 1:
        raise BadInput(f"--window must be at least 1, got {window}")
    groups = step_groups(run.path)
    steps = sorted(groups) or sorted({int(row["step"]) for row in run.steps})

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
        }

    first = summarize(steps[:window]) if steps else None
    last = summarize(steps[-window:]) if len(steps) > window else first
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
    their mean and std; the mean and std are None when nothing was ranked), latency. None when the run had no
    grader. A last line cut short (a killed run) is dropped, with a warning through ``say``."""
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
    seconds.sort()

    def pct(q: float) -> float | None:
        return seconds[min(len(seconds) - 1, int(q * len(seconds)))] if seconds else None

    return {
        "groups": groups,
        "mixed": mixed,
        "graded": graded,
        "fallbacks": fallbacks,
        "hacks_zeroed": hacks,
        "factors": len(scores),
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
    difference of two proportions with a Newcombe interval built from each arm's :func:`clustered_interval` (groups
    as clusters).
    """
    from whileai.simulations.passrate import bootstrap_interval

    tasks_a, tasks_b = final_tasks(a, window), final_tasks(b, window)
    if not tasks_a or not tasks_b:
        return None
    n_a, n_b = sum(n for _, n in tasks_a.values()), sum(n for _, n in tasks_b.values())
    shared = sorted(set(tasks_a) & set(tasks_b))
    if len(shared) >= 2:
        diffs = [tasks_b[t][0] / tasks_b[t][1] - tasks_a[t][0] / tasks_a[t][1] for t in shared]
        low, high = bootstrap_interval(diffs)
        return ArmComparison(sum(diffs) / len(diffs), low, high, True, len(shared), n_a, n_b)
    rate_a, rate_b = (clustered_interval(_last_groups(folder, window)) for folder in (a, b))
    p_a, p_b = rate_a.rate, rate_b.rate
    difference = p_b - p_a
    low = difference - math.sqrt((p_b - rate_b.low) ** 2 + (rate_a.high - p_a) ** 2)
    high = difference + math.sqrt((rate_b.high - p_b) ** 2 + (p_a - rate_a.low) ** 2)
    return ArmComparison(difference, low, high, False, 0, n_a, n_b)


def _last_groups(folder: Path, window: int) -> list[tuple[int, int]]:
    groups = step_groups(folder)
    return [g for step in sorted(groups)[-window:] for g in groups[step]]


def plot_runs(runs: list[RunHistory], path: Path) -> Path:
    """Pass rate, completion length and tool calls against step, as a PNG (needs matplotlib).

    Runs of one arm repeated over seeds (``whileai.experiments``: the arm and seed each run folder records) are drawn
    as the arm's mean over seeds with a 95% t band over seeds (drawn within the metric's range), as in Figure 8;
    otherwise each run is its own line, its pass rate with the clustered interval of its completion logs.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("matplotlib", "plot", "report --plot") from None
    from whileai.experiments import FIGURE_METRICS, run_arm

    present = [name for name, key in FIGURE_METRICS.items() if any(key in row for run in runs for row in run.steps)]
    arms = [run_arm(run.path) for run in runs]
    by_seed = len(set(arms)) < len(arms)
    if by_seed:
        panels = present or ["pass rate"]
    else:
        panels = ["pass rate"] + [name for name in present if name != "pass rate"]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.4), squeeze=False)
    if by_seed:
        _plot_arms(runs, panels, axes[0])
    else:
        _plot_each(runs, panels, axes[0])
    titles = {"pass rate": "pass rate", "length": "completion length (tokens)", "tool calls": "tool calls per rollout"}
    for column, name in enumerate(panels):
        axes[0][column].set_title(titles[name], fontsize=10)
        axes[0][column].set_xlabel("step")
        axes[0][column].grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _plot_arms(runs: list[RunHistory], panels: list[str], axes: Any) -> None:
    from whileai.experiments import seed_experiment

    experiment = seed_experiment([run.path for run in runs], window=1, metrics=panels)
    names = sorted(experiment["arms"], key=lambda name: (name != "binary", name))
    for name in names:
        arm = experiment["arms"][name]
        label = f"{name} (mean of {len(arm['seeds'])} seeds, 95% band)"
        for column, metric in enumerate(panels):
            band = arm["per_step"].get(metric)
            if not band or not band["steps"]:
                continue
            (line,) = axes[column].plot(band["steps"], band["mean"], label=label, linewidth=1.4)
            top = 1.0 if metric == "pass rate" else math.inf  # the band drawn within what the metric can be
            low, high = [max(0.0, v) for v in band["low"]], [min(top, v) for v in band["high"]]
            axes[column].fill_between(band["steps"], low, high, color=line.get_color(), alpha=0.2)


def _plot_each(runs: list[RunHistory], panels: list[str], axes: Any) -> None:
    from whileai.experiments import FIGURE_METRICS

    for run in runs:
        label = run.path.name
        rates = step_pass_rates(run.path)
        if rates:
            xs = [r.step for r in rates]
            (line,) = axes[0].plot(xs, [r.rate for r in rates], label=label)
            axes[0].fill_between(xs, [r.low for r in rates], [r.high for r in rates], color=line.get_color(), alpha=0.2)
        else:
            key = FIGURE_METRICS["pass rate"]
            points = [(row["step"], row[key]) for row in run.steps if key in row]
            if points:
                axes[0].plot(*zip(*points, strict=True), label=label)
        for column, name in enumerate(panels[1:], start=1):
            key = FIGURE_METRICS[name]
            points = [(row["step"], row[key]) for row in run.steps if key in row]
            if points:
                axes[column].plot(*zip(*points, strict=True), label=label)
