"""``whileai report``: tables of spread reports and training runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from whileai.cli.console import guarded, out, print_json


@guarded
def report(
    paths: Annotated[list[Path], typer.Argument(help="Spread reports (whileai spread --json) or TRL run folders.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the data as one JSON object.")] = False,
) -> None:
    """Print the grader's figures and the per-step training curves of runs, or a spread report.

    Example: whileai report runs/tiny_cpu_gar runs/tiny_cpu_binary

    Exit codes: 0 ok; 2 a path that is neither a spread report nor a run folder.
    """
    from whileai.reports import STEP_COLUMNS, RunHistory, load_report

    loaded = [load_report(p) for p in paths]
    if as_json:
        print_json(
            {
                "reports": [
                    {"path": str(r.path), "kind": "run", "steps": r.steps, "run": r.extra}
                    if isinstance(r, RunHistory)
                    else {"path": str(r.path), "kind": "spread", "report": r.data}
                    for r in loaded
                ]
            }
        )
        return
    for item in loaded:
        if isinstance(item, RunHistory):
            table = Table(title=f"run {item.path}", title_justify="left", show_edge=False)
            table.add_column("step", justify="right")
            for key in item.columns:
                table.add_column(STEP_COLUMNS[key], justify="right")
            for row in item.steps:
                table.add_row(str(int(row["step"])), *(_cell(row.get(key)) for key in item.columns))
            out.print(table)
        else:
            data = item.data
            table = Table(title=f"spread {item.path}", title_justify="left", show_edge=False, show_header=False)
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
