"""Figures of training runs: pass rate, completion length and tool calls against step, as a PNG.

The only module of whileai that imports matplotlib, and only when a figure is drawn (:func:`pyplot`): the optional
``plot`` extra, ``pip install 'whileai-grpo[plot]'``. What it draws comes ready from the modules that compute it: each
run's per-step pass rate with its clustered interval (``whileai.reports.runs.step_pass_rates``) and each arm's mean over
seeds with its t band (``whileai.reports.experiments.seed_experiment``).

What this module does not do: compute a figure or an interval (``whileai.stats``, ``whileai.reports.runs``,
``whileai.reports.experiments``) or print one (``whileai.cli.report``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from whileai.errors import needs_extra
from whileai.reports.experiments import FIGURE_METRICS, SHARES, run_arm, run_labels, seed_experiment
from whileai.reports.runs import RunHistory, step_pass_rates

__all__ = ["plot_runs", "pyplot"]

# Each panel's title, by the metric's name in FIGURE_METRICS.
PANEL_TITLES = {
    "pass rate": "pass rate",
    "length": "completion length (tokens)",
    "tool calls": "tool calls per rollout",
    "cut off": "share cut off at the length limit",
    "watch std": "grader scores' std (spread watch)",
}


_WATCH_FAILED = "whileai/watch/failed"


def pyplot(purpose: str = "drawing figures") -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend (no display needed).

    Raises:
        MissingExtra: matplotlib is not installed; the message names ``pip install 'whileai-grpo[plot]'`` and
            ``purpose``.
    """
    with needs_extra("plot", purpose):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    return plt


def plot_runs(runs: list[RunHistory], path: Path) -> Path:
    """Pass rate, completion length, tool calls, the share cut off and the spread watch's std of the grader's scores
    against step, one panel each (those the runs logged), written to ``path`` as a PNG.

    Runs of one arm repeated over seeds (``whileai.reports.experiments``: the arm and seed each run folder records) are
    drawn as the arm's mean over seeds with a 95% t band over seeds (drawn within the metric's range), as in Figure 8;
    otherwise each run is its own line, its pass rate with the clustered interval of its completion logs.

    Returns:
        ``path``.

    Raises:
        MissingExtra: matplotlib is not installed (``pip install 'whileai-grpo[plot]'``).
    """
    plt = pyplot("report --plot")
    present = [
        name
        for name, key in FIGURE_METRICS.items()
        if any(key in row or (name == "watch std" and _WATCH_FAILED in row) for run in runs for row in run.steps)
    ]
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
    for column, name in enumerate(panels):
        axes[0][column].set_title(PANEL_TITLES[name], fontsize=10)
        axes[0][column].set_xlabel("step")
        axes[0][column].grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _plot_arms(runs: list[RunHistory], panels: list[str], axes: Any) -> None:
    """Each arm's mean over seeds with its 95% band, one line per arm in each panel."""
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
            top = 1.0 if metric in SHARES else math.inf  # the band drawn within what the metric can be
            low, high = [max(0.0, v) for v in band["low"]], [min(top, v) for v in band["high"]]
            axes[column].fill_between(band["steps"], low, high, color=line.get_color(), alpha=0.2)


def _plot_each(runs: list[RunHistory], panels: list[str], axes: Any) -> None:
    """One line per run in each panel; the pass rate with its clustered interval when the run has completion logs,
    else as logged."""
    for run, label in zip(runs, run_labels([run.path for run in runs]), strict=True):
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
            color = None
            if points:
                (line,) = axes[column].plot(*zip(*points, strict=True), label=label)
                color = line.get_color()
            if name == "watch std":  # the checks that failed, marked where they were made (a broken one, no std, at 0)
                failed = [(row["step"], row.get(key, 0.0)) for row in run.steps if row.get(_WATCH_FAILED)]
                if failed:
                    axes[column].scatter(*zip(*failed, strict=True), marker="x", color=color, zorder=3)
