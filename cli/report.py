"""``whileai report``: tables of training runs (and a comparison of two arms) or of spread reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from whileai.cli.console import guarded, out, print_json, say


@guarded
def report(
    paths: Annotated[list[Path], typer.Argument(help="Run folders (whileai train, TRL output_dir) or spread reports.")],
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw pass rate and length against step (PNG).")] = None,
    window: Annotated[int, typer.Option(help="Logged steps that make a run's final pass rate.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the data as one JSON object.")] = False,
) -> None:
    """Print the grader's figures and per-step curves of runs; with two runs, the difference in final pass rate.

    Example: whileai report runs/tiny_cpu_gar runs/tiny_cpu_binary --plot arms.png

    Exit codes: 0 ok; 2 a path that is neither a run folder nor a spread report; 3 matplotlib or pyarrow missing.
    """
    from whileai.reports import (
        STEP_COLUMNS,
        RunHistory,
        compare_arms,
        grading_summary,
        load_report,
        plot_runs,
        step_pass_rates,
    )

    loaded = [load_report(p) for p in paths]
    runs = [r for r in loaded if isinstance(r, RunHistory)]
    data: dict[str, Any] = {"reports": []}
    for item in loaded:
        if isinstance(item, RunHistory):
            rates = step_pass_rates(item.path)
            entry = {
                "path": str(item.path),
                "kind": "run",
                "steps": item.steps,
                "pass_rates": [
                    {"step": r.step, "passes": r.passes, "n": r.n, "rate": r.rate, "low": r.low, "high": r.high}
                    for r in rates
                ],
                "grader": grading_summary(item.path),
                "run": item.extra,
            }
        else:
            entry = {"path": str(item.path), "kind": "spread", "report": item.data}
        data["reports"].append(entry)
    comparison = compare_arms(runs[0].path, runs[1].path, window) if len(runs) == 2 else None
    if comparison is not None:
        data["comparison"] = {
            "a": str(runs[0].path),
            "b": str(runs[1].path),
            "difference": comparison.difference,
            "low": comparison.low,
            "high": comparison.high,
            "paired": comparison.paired,
            "tasks": comparison.tasks,
            "text": str(comparison),
        }
    if plot is not None:
        if not runs:
            say("whileai: --plot needs at least one run folder")
        else:
            data["plot"] = str(plot_runs(runs, plot))
    if as_json:
        print_json(data)
        return

    for item, entry in zip(loaded, data["reports"], strict=True):
        if isinstance(item, RunHistory):
            _print_run(item, entry, STEP_COLUMNS)
        else:
            _print_spread(item.path, item.data)
    if len(runs) == 2:
        scales = [(r.extra or {}).get("scale_rewards") for r in runs]
        if None not in scales and scales[0] != scales[1]:
            say(f"whileai: the arms used different trainer.scale_rewards ({scales[0]} and {scales[1]}): not comparable")
    if comparison is not None:
        out.print(
            f"final pass rate, {runs[1].path.name} minus {runs[0].path.name} (last {window} logged steps): "
            f"{comparison}",
            markup=False,
        )
    if "plot" in data:
        say(f"whileai: wrote {data['plot']}")


def _print_run(item: Any, entry: dict[str, Any], columns: dict[str, str]) -> None:
    grader = entry["grader"]
    if grader is not None:
        table = Table(title=f"grader of {item.path}", title_justify="left", show_edge=False, show_header=False)
        table.add_column("figure")
        table.add_column("value", justify="right")
        for name in ("groups", "mixed", "graded", "hacks_zeroed", "factor_mean", "factor_std"):
            table.add_row(name.replace("_", " "), _cell(grader[name]))
        for reason, count in grader["fallbacks"].items():
            table.add_row(f"fell back: {reason}", str(count))
        if grader["latency_p50_s"] is not None:
            table.add_row("latency p50 / p95", f"{grader['latency_p50_s']:.3f} s / {grader['latency_p95_s']:.3f} s")
        figures = (item.extra.get("grader") or {}) if isinstance(item.extra, dict) else {}
        for kind, reason in (figures.get("first_failures") or {}).items():
            table.add_row(f"first {kind}", reason[:60])
        judge = figures.get("judge")
        if judge:
            table.add_row("judge calls (retries)", f"{judge.get('calls', 0)} ({judge.get('retries', 0)})")
            table.add_row("judge cache hits", str(judge.get("cache_hits", 0)))
            table.add_row("judge tokens in / out", f"{judge.get('tokens_in', 0)} / {judge.get('tokens_out', 0)}")
            if judge.get("latency_p50_s") is not None:
                table.add_row(
                    "judge call p50 / p95", f"{judge['latency_p50_s']:.3f} s / {judge['latency_p95_s']:.3f} s"
                )
            for kind, count in (judge.get("failures") or {}).items():
                table.add_row(f"judge failed: {kind}", str(count))
        out.print(table)
    rates = {r["step"]: r for r in entry["pass_rates"]}
    table = Table(title=f"run {item.path}", title_justify="left", show_edge=False)
    table.add_column("step", justify="right")
    shown = [k for k in item.columns if k != "whileai/pass_rate"]
    for key in shown[:1]:
        table.add_column(columns[key], justify="right")
    table.add_column("pass rate (95% CI, n)", justify="right")
    for key in shown[1:]:
        table.add_column(columns[key], justify="right")
    for row in item.steps:
        step = int(row["step"])
        rate = rates.get(step)
        cell = f"{rate['rate']:.2f} ({rate['low']:.2f} to {rate['high']:.2f}, n={rate['n']})" if rate else ""
        values = [_cell(row.get(k)) for k in shown]
        table.add_row(str(step), *values[:1], cell, *values[1:])
    out.print(table)


def _print_spread(path: Path, data: dict[str, Any]) -> None:
    table = Table(title=f"spread {path}", title_justify="left", show_edge=False, show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name in ("verdict", "scores", "groups", "std", "median", "near_median", "skipped_groups"):
        table.add_row(name, _cell(data.get(name)))
    for reason, count in (data.get("failed_groups") or {}).items():
        table.add_row(f"fell back: {reason}", str(count))
    out.print(table)
    out.print(data.get("summary", ""), markup=False)
    out.print(data.get("conclusion", ""), markup=False)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
