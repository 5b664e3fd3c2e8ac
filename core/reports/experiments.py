"""Arms over seeds: per-step bands and final-window differences of runs repeated with different seeds.

A comparison of two training arms (binary GRPO against a grader, say) from one seed each says little: two seeds of
the same arm differ by as much. Here the unit of analysis is the seed. Each run folder belongs to an arm (the
recipe's ``comparison_arm`` as recorded in the run, else ``binary`` for a recipe with no grader and ``gar`` or
``grs`` by the grading mode for one with a grader, else the parent folder's name) and has a seed (``trainer.seed``).
For each arm and metric:

- **per step**: the mean over seeds with a 95% t interval over seeds (the band ``whileai.reports.plots`` draws for
  ``whileai report --plot``);
- **final window**: per run, the mean of the metric over its last ``window`` logged steps;
- **difference** (second arm minus the first; ``binary`` first when present): paired by seed when both arms ran the
  same seeds (arms that start from the same seed start from the same model), the mean of the per-seed differences
  with a 95% t interval on n - 1 degrees of freedom; unpaired (Welch) otherwise. ``detectable`` is the smallest true
  difference the design finds with 80% power in a two-sided 5% test, (t_0.975 + t_0.80) times the standard error.

The metrics are TRL's logged figures per step (``FIGURE_METRICS``): the verifier's pass rate (``whileai/pass_rate``),
the mean completion length in tokens (``completions/mean_length``), tool calls per completion
(``tools/call_frequency``, multi-turn runs only), the share of completions cut off at the length limit
(``completions/clipped_ratio``) and the std of the grader's scores at each check of the spread watch
(``whileai/watch/std``, grader arms).

What this module does not do: the interval arithmetic (``whileai.stats``: :func:`~whileai.stats.t_interval`,
:func:`~whileai.stats.welch_interval`, :func:`~whileai.stats.detectable_difference`), read a run's log history itself
(``whileai.reports.runs.load_report``), or draw (``whileai.reports.plots``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from whileai.errors import BadInput
from whileai.reports.runs import RunHistory, load_report
from whileai.stats import detectable_difference, mean, t_interval, welch_interval

__all__ = [
    "FIGURE_METRICS",
    "SHARES",
    "Difference",
    "format_value",
    "run_arm",
    "run_seed",
    "seed_difference",
    "seed_experiment",
]

# The figures of Figure 8, by name, with the log_history key TRL writes them under.
FIGURE_METRICS: dict[str, str] = {
    "pass rate": "whileai/pass_rate",
    "length": "completions/mean_length",
    "tool calls": "tools/call_frequency",
    "cut off": "completions/clipped_ratio",
    "watch std": "whileai/watch/std",
}
# The metrics that are shares of completions: printed in percent, their bands drawn within [0, 1].
SHARES = ("pass rate", "cut off")


def _recipe(folder: Path) -> dict[str, Any] | None:
    path = folder / "recipe.yaml"
    if not path.is_file():
        return None
    from whileai.yamldata import read_yaml_file

    data = read_yaml_file(path)
    return data if isinstance(data, dict) else None


def run_arm(folder: Path) -> str:
    """The arm a run folder belongs to: the recipe's ``comparison_arm``, else ``binary`` (no grader), ``gar``
    (``grading.mode: advantage``) or ``grs`` (``reward``), else the name of the folder that holds it."""
    recipe = _recipe(folder)
    if recipe is None:
        return folder.resolve().parent.name
    if recipe.get("comparison_arm"):
        return str(recipe["comparison_arm"])
    if recipe.get("grader") is None:
        return "binary"
    mode = (recipe.get("grading") or {}).get("mode", "advantage")
    return {"advantage": "gar", "reward": "grs"}.get(mode, str(mode))


def run_labels(folders: Sequence[Path]) -> list[str]:
    """What a table or a legend calls each run: its folder's name, or, where two share a name (``gar/seed-1`` and
    ``binary/seed-1``), its arm and the name.

    Example:
        >>> run_labels([Path("runs/a"), Path("runs/b")])
        ['a', 'b']
    """
    names = [folder.name for folder in folders]
    if len(set(names)) == len(names):
        return names
    labels = [f"{run_arm(folder)}/{folder.name}" for folder in folders]
    return labels if len(set(labels)) == len(labels) else [str(folder) for folder in folders]


def run_seed(folder: Path) -> str:
    """The seed of a run folder (the recipe's ``trainer.seed``), else the folder's name."""
    recipe = _recipe(folder) or {}
    seed = (recipe.get("trainer") or {}).get("seed")
    return str(seed) if seed is not None else folder.name


@dataclass(frozen=True)
class Difference:
    """``b`` minus ``a`` over seeds: the mean difference, its 95% interval, n and the detectable difference."""

    a: str
    b: str
    difference: float
    low: float
    high: float
    n_a: int
    n_b: int
    paired: bool
    detectable: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def seed_difference(a: dict[str, float], b: dict[str, float], names: tuple[str, str] = ("a", "b")) -> Difference:
    """``b`` minus ``a`` where each maps seed to a run's value: paired over shared seeds when both ran the same seeds,
    else Welch's unpaired interval.

    Example:
        >>> d = seed_difference({"1": 0.5, "2": 0.6, "3": 0.4}, {"1": 0.7, "2": 0.7, "3": 0.6})
        >>> round(d.difference, 3), d.paired, round(d.low, 3), round(d.high, 3)
        (0.167, True, 0.023, 0.31)
    """
    finite_a = {k: v for k, v in a.items() if math.isfinite(v)}
    finite_b = {k: v for k, v in b.items() if math.isfinite(v)}
    if not finite_a or not finite_b:
        return Difference(*names, math.nan, math.nan, math.nan, len(finite_a), len(finite_b), False, math.nan)
    paired = set(finite_a) == set(finite_b) and len(finite_a) >= 2
    if paired:
        interval = t_interval([finite_b[k] - finite_a[k] for k in sorted(finite_a)])
    else:
        interval = welch_interval(list(finite_a.values()), list(finite_b.values()))
    detectable = detectable_difference(interval.se, interval.df)
    return Difference(
        *names, interval.estimate, interval.low, interval.high, len(finite_a), len(finite_b), paired, detectable
    )


def _steps_of(folder: Path) -> list[dict[str, Any]]:
    run = load_report(folder)
    if not isinstance(run, RunHistory):
        raise BadInput(f"{folder}: a spread report, not a run folder")
    return run.steps


def seed_experiment(folders: Iterable[Path], window: int, metrics: Sequence[str] | None = None) -> dict[str, Any]:
    """Arms, per-step bands and final-window differences of run folders repeated over seeds (module docstring).

    Returns:
        ``{"window", "metrics", "arms": {arm: {"seeds": [...], "runs": {seed: folder}, "first": {metric: {seed:
        value}}, "final": {metric: {seed: value}}, "per_step": {metric: {"steps", "mean", "low", "high", "n"}}}},
        "differences": {metric: Difference.as_dict()}}``; differences only for exactly two arms.

    Raises:
        BadInput: a window below 1, an unknown metric, or two runs of one arm with the same seed.
    """
    if window < 1:
        raise BadInput(f"window must be at least 1, got {window}")
    chosen = list(metrics) if metrics is not None else list(FIGURE_METRICS)
    unknown = [m for m in chosen if m not in FIGURE_METRICS]
    if unknown:
        raise BadInput(f"unknown metric {unknown[0]!r}; known: {', '.join(FIGURE_METRICS)}")
    arms: dict[str, dict[str, Any]] = {}
    for folder in folders:
        folder = Path(folder)
        arm, seed = run_arm(folder), run_seed(folder)
        entry = arms.setdefault(arm, {"seeds": [], "runs": {}, "first": {}, "final": {}, "series": {}})
        if seed in entry["runs"]:
            raise BadInput(f"{folder}: arm {arm!r} already has a run with seed {seed} ({entry['runs'][seed]})")
        entry["seeds"].append(seed)
        entry["runs"][seed] = str(folder)
        steps = _steps_of(folder)
        for metric in chosen:
            key = FIGURE_METRICS[metric]
            points = [(int(row["step"]), float(row[key])) for row in steps if key in row]
            entry["series"].setdefault(metric, {})[seed] = points
            values = [v for _, v in points]
            entry["first"].setdefault(metric, {})[seed] = mean(values[:window])
            entry["final"].setdefault(metric, {})[seed] = mean(values[-window:])
    for entry in arms.values():
        entry["per_step"] = {metric: _band(entry["series"][metric]) for metric in entry["series"]}
        del entry["series"]
    result: dict[str, Any] = {"window": window, "metrics": chosen, "arms": arms, "differences": {}}
    if len(arms) == 2:
        names = sorted(arms, key=lambda name: (name != "binary", name))
        for metric in chosen:
            a, b = (arms[name]["final"].get(metric, {}) for name in names)
            if a and b:
                result["differences"][metric] = seed_difference(a, b, (names[0], names[1])).as_dict()
    return result


def _band(per_seed: dict[str, list[tuple[int, float]]]) -> dict[str, list[float]]:
    """Mean over seeds at each step every seed logged, with a 95% t interval over seeds."""
    by_step: dict[int, list[float]] = {}
    for points in per_seed.values():
        for step, value in points:
            by_step.setdefault(step, []).append(value)
    steps = sorted(s for s, values in by_step.items() if len(values) == len(per_seed))
    band: dict[str, list[float]] = {"steps": steps, "mean": [], "low": [], "high": [], "n": []}
    for step in steps:
        values = by_step[step]
        interval = t_interval(values)
        # an arm of one seed has no interval: its band is its line
        low, high = (interval.low, interval.high) if len(values) > 1 else (interval.estimate, interval.estimate)
        band["mean"].append(interval.estimate)
        band["low"].append(low)
        band["high"].append(high)
        band["n"].append(len(values))
    return band


def format_value(metric: str, value: float, signed: bool = False) -> str:
    """A metric's value as the tables print it: shares (pass rate, cut off) in percent (differences in points),
    others to 2 places."""
    if not math.isfinite(value):
        return "n/a"
    if metric in SHARES:
        return f"{value * 100:+.1f} pts" if signed else f"{value * 100:.1f}%"
    return f"{value:+.2f}" if signed else f"{value:.2f}"
