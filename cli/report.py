"""``whileai report``: a compact summary of each training run (and of two arms compared) or spread report.

By default each run gets a few lines that fit an 80-column terminal: its steps, the pass rate and mean completion length
over the first and the last ``--window`` logged steps, and the grader's figures; two runs add the paired difference of
their final pass rates. ``--steps`` adds the per-step table, which drops its least needed columns (and says which) when
the terminal is too narrow for all of them. Every pass-rate interval treats each group of completions as a cluster
(``whileai.stats.clustered_interval``). ``--plot`` draws through ``whileai.reports.plots``, imported only then."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.measure import Measurement
from rich.table import Table

from whileai.cli.console import guarded, out, print_json, say
from whileai.defaults import REPORT_WINDOW
from whileai.grading.tally import mostly_fell_back

# Per-step columns in the order they are dropped when the terminal is too narrow (first dropped first); the step,
# its pass rate and interval are never dropped.
_DROPPED_FIRST = (
    "reward_std",
    "groupwise/score_std",
    "reward",
    "n",
    "groupwise/score_mean",
    "groupwise/hacks_zeroed",
    "groupwise/fallbacks",
    "groupwise/mixed",
    "frac_reward_zero_std",
    "tools/call_frequency",
    "completions/mean_length",
)
# A verl run's own counts (whileai_verl.json): responses that kept their verifier rewards, and why.
_VERL_ROWS = (
    ("late_responses", "late responses"),
    ("repeated_uid_responses", "repeated uids"),
    ("verifier_failures", "verifier failures"),
    ("groups_actor_lost", "groups actor lost"),
)
_COUNTS = ("groupwise/mixed", "groupwise/fallbacks", "groupwise/hacks_zeroed")
_FACTORS = ("groupwise/score_mean", "groupwise/score_std")


@guarded
def report(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN...",
            help="Run folders (whileai train, TRL output_dir), spread reports, or verl grading folders.",
        ),
    ],
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw pass rate and length against step (PNG).")] = None,
    window: Annotated[
        int,
        typer.Option(min=1, help="Logged steps in the first and the last window (the last is the final pass rate)."),
    ] = REPORT_WINDOW,
    steps: Annotated[bool, typer.Option("--steps", help="Also print each run's per-step table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the data as one JSON object.")] = False,
) -> None:
    """Summarize runs (pass rate and length over the first and last window, the grader's figures) and spread reports;
    with two runs, the difference in final pass rate, paired over tasks; with two arms run over several seeds (the
    arm and seed each run recorded), the final-window differences over seeds, and --plot draws each arm's mean over
    seeds with a 95% band.

    Pass-rate intervals are 95% Wilson intervals on the design-effect-adjusted n: each group of completions (one
    prompt's num_generations) is a cluster, so n reads "n=320 in 40 groups".

    Example: whileai report runs/tiny_cpu_binary runs/tiny_cpu_gar --window 10 --steps

    Exit codes: 0 ok; 2 a path that is neither a run folder nor a spread report; 3 matplotlib or pyarrow missing;
    130 interrupted (Ctrl-C).
    """
    from whileai.reports.runs import RunHistory, load_report, reports_data

    loaded = [load_report(p) for p in paths]
    runs = [r for r in loaded if isinstance(r, RunHistory)]
    data = reports_data(loaded, window, say)
    experiment = _seed_experiment(runs, window)
    if experiment is not None:
        data["arms"] = experiment
    comparison = data.get("comparison")
    if plot is not None:
        if not runs:
            say("whileai: --plot needs at least one run folder")
        else:
            from whileai.reports.plots import plot_runs

            data["plot"] = str(plot_runs(runs, plot))
    if as_json:
        print_json(data)
        return

    for number, (item, entry) in enumerate(zip(loaded, data["reports"], strict=True)):
        if number:
            out.print()
        _print_report(item, entry, steps)
    if len(runs) == 2:
        scales = [(r.extra or {}).get("scale_rewards") for r in runs]
        if None not in scales and scales[0] != scales[1]:
            say(f"whileai: the arms used different trainer.scale_rewards ({scales[0]} and {scales[1]}): not comparable")
    for what, found in (("final pass rate", comparison), ("held-out pass rate", data.get("held_out_comparison"))):
        if found is not None:
            out.print()
            _print_comparison(runs[0].path, runs[1].path, window, found, what)
    if experiment is not None:
        out.print()
        _print_arms(experiment)
    if "plot" in data:
        say(f"whileai: wrote {data['plot']}")


# ---------------------------------------------------------------- the default summary


def _print_report(item: Any, entry: dict[str, Any], steps: bool) -> None:
    """One path's report: a verl grading folder's figures, a run's summary (its spread watch and, with ``steps``,
    its per-step table), or a spread report."""
    from whileai.reports.runs import GradingFolder, RunHistory

    if isinstance(item, GradingFolder):
        _heading(f"grading {item.path}", f"the grader's figures of a {item.figures.get('trainer', 'verl')} run")
        rows = _grader_rows(entry["grader"], item.figures)
        for key, label in _VERL_ROWS:
            if key in item.figures:
                rows.append((label, str(item.figures[key])))
        out.print(_figures(rows))
        if entry.get("watch"):
            out.print()
            _print_watch(item.path, entry["watch"], every=steps)
    elif isinstance(item, RunHistory):
        _print_summary(item, entry)
        if entry.get("watch"):
            out.print()
            _print_watch(item.path, entry["watch"], every=steps)
        if steps:
            out.print()
            _print_steps(item, entry)
    else:
        _print_spread(item.path, item.data)


def _heading(text: str, detail: str = "", joiner: str = ": ") -> None:
    """``text`` and ``detail`` on one line when they fit the terminal, else on two (a long path stays whole)."""
    lines = [f"{text}{joiner}{detail}"] if detail else [text]
    if detail and len(lines[0]) > out.width:
        lines = [text, detail]
    for line in lines:
        out.print(line, soft_wrap=False, overflow="fold")


_LABEL_WIDTH = 18  # the label column of the summary's tables, wider when a label needs it (up to 30)


def _figures(rows: list[tuple[str, str]], label_width: int = _LABEL_WIDTH) -> Table:
    """A two-column table of labelled figures: no header, no outer edge, long values wrapped (never cut). Labels and
    values are printed as written (``out`` shows text as text: failure kinds and messages are text whileai did not
    write)."""
    table = Table(show_header=False, show_edge=False, box=None, pad_edge=False, padding=(0, 2, 0, 1))
    table.add_column("figure", width=label_width, overflow="fold")
    table.add_column("value", overflow="fold")
    for label, value in rows:
        table.add_row(label, value)
    return table


def _rate(rate: dict[str, Any]) -> str:
    return f"{rate['rate']:.2f} ({rate['low']:.2f} to {rate['high']:.2f})"


def _gate_rows(run: Any) -> list[tuple[str, str]]:
    """The spread gate's verdict the run was trained on (``whileai_run.json``), and whether it trained past it."""
    gate = run.get("spread") if isinstance(run, dict) else None
    if not isinstance(gate, dict) or "verdict" not in gate:
        return []
    shown = str(gate["verdict"])
    if gate.get("skipped"):
        shown += f" ({gate['skipped']})"
    elif gate["verdict"] != "yes" and run.get("skip_spread_gate") and run.get("started"):
        shown += ", trained anyway (--skip-spread-gate)"
    return [("spread gate", shown)]


def _verifier_rows(run: Any) -> list[tuple[str, str]]:
    """The verifier's failures in ``whileai_run.json``: how many, by kind, the first, and a stop they caused."""
    verifier = run.get("verifier") if isinstance(run, dict) else None
    if not isinstance(verifier, dict) or not verifier.get("failures"):
        return []
    kinds = ", ".join(f"{kind} x{count}" for kind, count in (verifier.get("kinds") or {}).items())
    rows = [
        ("verifier failures", f"{verifier['failures']} ({kinds})"),
        ("first verifier failure", str(verifier.get("first"))),
    ]
    if isinstance(stopped := run.get("stopped_by_verifier"), dict):
        rows.append(("stopped", f"at step {stopped.get('step')}: the verifier scored nothing"))
    return rows


def _grader_rows(grader: dict[str, Any] | None, figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The grader's figures (from grading.jsonl) and, from whileai_run.json, the first failure of each kind and the
    judge's figures."""
    rows: list[tuple[str, str]] = []
    if grader is None:
        rows.append(("grader", "none (no grading.jsonl)"))
    else:
        rows.append(("grader", f"{grader['groups']} groups, {grader['mixed']} mixed, {grader['graded']} graded"))
        if plain := mostly_fell_back(grader.get("fallbacks") or {}, grader["graded"]):
            rows.append(("trained", plain))
        rows.append(("hacks zeroed", str(grader["hacks_zeroed"])))
        if grader["factor_mean"] is None:
            rows.append(("factors", "none (nothing was ranked)"))
        else:
            mean, std = grader["factor_mean"], grader["factor_std"]
            rows.append(("factors", f"{grader['factors']}: mean {mean:.3f}, std {std:.3f}"))
        if grader["latency_p50_s"] is not None:
            rows.append(("latency p50 / p95", f"{grader['latency_p50_s']:.3f} s / {grader['latency_p95_s']:.3f} s"))
    fallbacks = (grader or {}).get("fallbacks") or figures.get("fallbacks") or {}
    if grader is not None or figures:
        if not fallbacks:
            rows.append(("fallbacks", "none"))
        rows.extend((f"fell back: {kind}", str(count)) for kind, count in fallbacks.items())
        rows.extend((f"first {kind}", str(reason)) for kind, reason in (figures.get("first_failures") or {}).items())
    judge = figures.get("judge")
    if judge:
        rows.append(("judge calls (retries)", f"{judge.get('calls', 0)} ({judge.get('retries', 0)})"))
        rows.append(("judge cache hits", str(judge.get("cache_hits", 0))))
        rows.append(("judge tokens in / out", f"{judge.get('tokens_in', 0)} / {judge.get('tokens_out', 0)}"))
        if judge.get("latency_p50_s") is not None:
            rows.append(("judge call p50 / p95", f"{judge['latency_p50_s']:.3f} s / {judge['latency_p95_s']:.3f} s"))
        rows.extend((f"judge failed: {kind}", str(count)) for kind, count in (judge.get("failures") or {}).items())
    return rows


def _print_summary(item: Any, entry: dict[str, Any]) -> None:
    summary = entry["summary"]
    shapes = {(r["n"], r["groups"]) for r in entry["pass_rates"]}
    shape = ""
    if len(shapes) == 1:
        n, groups = shapes.pop()
        shape = f", {n} completions in {groups} groups a step"
    _heading(f"run {item.path}", f"{summary['steps']} logged steps{shape}")

    figures = (item.extra.get("grader") or {}) if isinstance(item.extra, dict) else {}
    grader_rows = [*_gate_rows(item.extra), *_verifier_rows(item.extra), *_grader_rows(entry["grader"], figures)]
    label_width = min(30, max([_LABEL_WIDTH] + [len(label) for label, _ in grader_rows]))
    first, last = summary["first"], summary["last"]
    if first is not None:
        windows = [first] if last is first else [first, last]
        rows: list[list[str]] = []
        rates = [w["pass_rate"] for w in windows]
        if all(r is not None for r in rates):
            rows.append(["pass rate (95% CI)", *(_rate(r) for r in rates)])
            rows.append(["", *(f"n={r['n']} in {r['groups']} groups" for r in rates)])
        elif any(w["unscored"] for w in windows):  # logged, and none of a window's completions scored
            rows.append(["pass rate", *(_rate(r) if r else "none scored" for r in rates)])
        elif any(w["logged_pass_rate"] is not None for w in windows):
            logged = [w["logged_pass_rate"] for w in windows]
            rows.append(["pass rate", *("" if p is None else f"{p:.2f} as logged" for p in logged)])
            rows.append(["", *("no completion logs, no interval" for _ in windows)])
        else:
            rows.append(["pass rate", *("no completion logs" for _ in windows)])
        if any(w["unscored"] for w in windows):
            rows.append(["unscored", *(f"{w['unscored']} completions" for w in windows)])
        lengths = [w["mean_length"] for w in windows]
        if any(length is not None for length in lengths):
            rows.append(["mean length", *("" if x is None else f"{x:.1f} tokens" for x in lengths)])
        table = Table(show_edge=False, box=None, pad_edge=False, padding=(0, 2, 0, 1), header_style="bold")
        table.add_column("", width=label_width, overflow="fold")
        for chosen in windows:
            low, high = chosen["steps"]
            table.add_column(f"step {low}" if low == high else f"steps {low}-{high}", overflow="fold")
        for row in rows:
            table.add_row(*row)
        out.print(table)
    out.print(_figures([*_held_out_rows(entry), *grader_rows], label_width))


def _held_out_rows(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """What ``whileai eval`` measured of the run's final model (marked when the run trained on after it) and of the
    model it started from (``--initial``)."""
    rows: list[tuple[str, str]] = []
    held_out, initial = entry.get("held_out"), entry.get("held_out_initial")
    if held_out is not None:
        rate = held_out["pass_rate"]
        rows.append(("held-out pass rate", f"{_rate(rate)}, n={rate['n']} in {rate['groups']} groups (whileai eval)"))
        rows.append(("held-out length", f"{held_out['mean_length_tokens']:.1f} tokens, {held_out['prompts']} prompts"))
        if held_out.get("stale"):
            rows.append(
                (
                    "held-out is stale",
                    f"measured at step {held_out['trained_steps']}; the run has trained to step "
                    f"{held_out['run_steps']} since: whileai eval {entry['path']} again",
                )
            )
        elif held_out.get("stale") is None:
            rows.append(("held-out step", "not recorded: an eval.json older than this whileai; eval again to know"))
    if initial is not None:
        rate = initial["pass_rate"]
        rows.append(("initial held-out", f"{_rate(rate)}, n={rate['n']}, the model it started from (eval --initial)"))
    note = (held_out or initial or {}).get("note")
    if note:
        rows.append(("held-out note", note))
    return rows


def _print_comparison(a: Path, b: Path, window: int, comparison: dict[str, Any], what: str = "final pass rate") -> None:
    def signed(value: float) -> str:
        return f"{value * 100:+.1f}".replace("-", "\u2212")

    from whileai.reports.experiments import run_labels

    where = f"last {window} logged steps" if what == "final pass rate" else "whileai eval, the same prompts"
    first, second = run_labels([a, b])
    _heading(f"{what}, {second} minus {first}", where, ", ")
    paired = comparison["paired"]
    how = "bootstrap over tasks" if paired else "Newcombe, groups as clusters"
    completions = f"{comparison['n_a']} and {comparison['n_b']} completions"
    rows = [
        ("difference", f"{signed(comparison['difference'])} points"),
        ("95% CI", f"{signed(comparison['low'])} to {signed(comparison['high'])} ({how})"),
        ("n", f"paired over {comparison['tasks']} tasks ({completions})" if paired else completions),
        ("note", "one run an arm: an interval over tasks, not seeds"),
    ]
    out.print(_figures(rows))


def _seed_experiment(runs: list[Any], window: int) -> dict[str, Any] | None:
    """Two arms with at least two seeds in one of them: the seeds are the unit (whileai.reports.experiments)."""
    from whileai.reports.experiments import FIGURE_METRICS, run_arm, seed_experiment

    arms = [run_arm(run.path) for run in runs]
    if len(set(arms)) != 2 or len(set(arms)) == len(arms):
        return None
    # A figure one arm does not log (a binary arm has no watch) has no difference to show.
    present = [
        name for name, key in FIGURE_METRICS.items() if all(any(key in row for row in run.steps) for run in runs)
    ]
    return seed_experiment([run.path for run in runs], window=window, metrics=present)


def _print_arms(experiment: dict[str, Any]) -> None:
    from whileai.reports.experiments import format_value

    differences = experiment["differences"]
    if not differences:
        return
    first = next(iter(differences.values()))
    how = f"paired over {first['n_a']} seeds" if first["paired"] else f"Welch, n={first['n_a']} and {first['n_b']}"
    _heading(f"over seeds, {first['b']} minus {first['a']}", f"last {experiment['window']} logged steps, {how}", ", ")
    table = Table(show_edge=False, box=None, pad_edge=False, padding=(0, 2, 0, 1), header_style="bold")
    table.add_column("", width=_LABEL_WIDTH, overflow="fold")
    for title in ("difference", "95% CI", "detectable"):
        table.add_column(title, overflow="fold")
    for metric, diff in differences.items():
        if not math.isfinite(diff["difference"]):
            table.add_row(metric, "none: too few values in an arm's last window", "", "")
            continue
        shown = [format_value(metric, diff[key], True) for key in ("difference", "low", "high", "detectable")]
        shown = [value.replace("-", "\u2212") for value in shown]
        table.add_row(metric, shown[0], f"{shown[1]} to {shown[2]}", shown[3].lstrip("+"))
    out.print(table)


# ---------------------------------------------------------------- the spread watch


# Checks shown in full up to this many; beyond it, the failed ones and the last (--steps: every one).
_WATCH_ROWS = 12


def _print_watch(path: Path, checks: list[dict[str, Any]], every: bool = False) -> None:
    """The spread watch over steps: one row per check (its window, verdict and figures), then what each failed
    check said."""
    failed = [c for c in checks if c.get("failed")]
    shown = checks
    if len(checks) > _WATCH_ROWS and not every:
        shown = [c for c in checks if c.get("failed") or c is checks[-1]][-_WATCH_ROWS:]
    detail = f"{len(checks)} check{'' if len(checks) == 1 else 's'}, {len(failed)} failed"
    if len(shown) < len(checks):
        detail += f"; the failed ones and the last shown (--steps: all {len(checks)})"
    _heading(f"spread watch of {path}", detail)

    def number(value: Any, form: str) -> str:
        return "" if value is None else form.format(value)

    table = Table(show_edge=False)
    for title in ("steps", "verdict", "std", "near med", "ctl tau", "tied", "fallbk", "hacks", "paid"):
        table.add_column(title, justify="right")
    for check in shown:
        low, high = check.get("steps") or [check["step"], check["step"]]
        table.add_row(
            f"{low}-{high}",
            str(check.get("verdict")) + (" stop" if check.get("stop") else ""),
            number(check.get("std"), "{:.3f}"),
            number(check.get("near_median"), "{:.0%}"),
            number(check.get("control_tau"), "{:.2f}"),
            number(check.get("copies_tied"), "{:.0%}"),
            number(check.get("fallback_rate"), "{:.0%}"),
            number(check.get("hack_rate"), "{:.0%}"),
            ", ".join(check.get("paid_for") or []),
        )
    out.print(table)
    for check in failed[:3]:
        out.print(f"step {check['step']}: {check.get('why', '')}", soft_wrap=False, overflow="fold")
    if len(failed) > 3:
        out.print(f"... and {len(failed) - 3} more failed checks (--json has each)")


# ---------------------------------------------------------------- --steps: the per-step table


def _step_cell(key: str, row: dict[str, Any]) -> str:
    value = row.get(key)
    if value is None:
        return ""
    calls = row.get("groupwise/grader_calls")
    if key in _FACTORS and (calls == 0 or (calls is not None and row.get("groupwise/fallbacks", 0) >= calls)):
        return "\u2013"  # nothing was ranked at this step (no call, or every one fell back): no factor mean of nothing
    if key in _COUNTS and float(value).is_integer():
        return str(int(value))
    if key == "completions/mean_length":
        return f"{value:.1f}"
    return _cell(value)


def _print_steps(item: Any, entry: dict[str, Any]) -> None:
    """The per-step table; columns the terminal has no room for are left out, least needed first, and named."""
    from whileai.reports.runs import STEP_COLUMNS

    rates = {r["step"]: r for r in entry["pass_rates"]}
    shapes = {(r["n"], r["groups"]) for r in rates.values()}
    rows = [(int(row["step"]), row) for row in item.steps]
    for step in sorted(set(rates) - {s for s, _ in rows}):
        rows.append((step, {"step": step}))
    rows.sort(key=lambda pair: pair[0])

    columns: list[tuple[str, str, list[str]]] = [("step", "step", [str(step) for step, _ in rows])]
    rate_cells = [rates.get(step) for step, _ in rows]
    if rates:
        columns.append(("rate", "pass rate", [f"{r['rate']:.2f}" if r else "" for r in rate_cells]))
        columns.append(("ci", "95% CI", [f"{r['low']:.2f}\u2013{r['high']:.2f}" if r else "" for r in rate_cells]))
        if len(shapes) > 1:
            columns.append(("n", "n/groups", [f"{r['n']}/{r['groups']}" if r else "" for r in rate_cells]))
    shown = [k for k in item.columns if not (rates and k == "whileai/pass_rate")]
    for key in shown:
        columns.append((key, STEP_COLUMNS[key], [_step_cell(key, row) for _, row in rows]))

    detail = "per step"
    if rates and len(shapes) == 1:
        n, groups = next(iter(shapes))
        detail = f"per step, the pass rate's 95% CI over the step's groups (n={n} in {groups} groups)"
    left_out: list[str] = []
    while True:
        table = _steps_table(columns, tight=False)
        if _width(table) <= out.width:
            break
        table = _steps_table(columns, tight=True)
        droppable = [k for k in _DROPPED_FIRST if any(key == k for key, _, _ in columns)]
        if _width(table) <= out.width or not droppable:
            break
        left_out.append(next(name for key, name, _ in columns if key == droppable[0]))
        columns = [c for c in columns if c[0] != droppable[0]]
    _heading(f"run {item.path}", detail, ", ")
    out.print(table)
    if left_out:
        _heading(f"left out at {out.width} columns: {', '.join(left_out)} (a wider terminal or --json shows them)")


def _width(table: Table) -> int:
    """The width ``table`` takes when nothing limits it (Rich clamps a measurement to the terminal's width)."""
    return Measurement.get(out, out.options.update_width(10_000), table).maximum


def _steps_table(columns: list[tuple[str, str, list[str]]], tight: bool) -> Table:
    """The per-step table; ``tight`` sets each column to its narrowest width that cuts no number and no word."""
    table = Table(show_edge=False)
    for _, title, cells in columns:
        width = max([len(word) for word in title.split()] + [len(c) for c in cells]) if tight else None
        table.add_column(title, justify="right", width=width, overflow="fold")
    for cells in zip(*(c for _, _, c in columns), strict=True):
        table.add_row(*cells)
    return table


# ---------------------------------------------------------------- spread reports


def _print_spread(path: Path, data: dict[str, Any]) -> None:
    _heading(f"spread {path}")
    names = ("verdict", "scores", "groups", "movable_groups", "std", "median", "near_median", "skipped_groups")
    rows = [(name, _cell(data[name])) for name in names if data.get(name) is not None]  # a stopped gate has fewer
    rows += [(f"fell back: {reason}", str(count)) for reason, count in (data.get("failed_groups") or {}).items()]
    out.print(_figures(rows, min(30, max([_LABEL_WIDTH, *(len(label) for label, _ in rows)]))))
    lines = [data.get("summary", ""), data.get("conclusion", "")]
    controls = data.get("controls")
    if isinstance(controls, dict) and data.get("verdict") != "broken":  # the gate's third line, as it printed it
        warning = controls.get("warning")
        lines += [controls.get("line", ""), f"{warning}." if warning else ""]
    for line in filter(None, lines):
        out.print(str(line), soft_wrap=False, overflow="fold")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
