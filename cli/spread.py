"""``whileai spread``: the spread gate on graded rows, as a preflight and as a CI job that fails on no spread."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from whileai.cli.console import err, guarded, hack_note, is_debug, out, print_json, say, show_log
from whileai.errors import BadInput, GraderUnavailable

if TYPE_CHECKING:
    from rich.table import Table

# The options spread and judge-eval share (one recipe-and-grader setup: whileai.config.build.gate_setup).
RecipeOption = Annotated[Path | None, typer.Option("--recipe", "-r", help="A recipe with a grader section.")]
GraderOption = Annotated[
    str | None,
    typer.Option("--grader", "-g", help="module:function, path/to/file.py:function, or a scripted rule file."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="A judge grader asks again instead of its cache.")]
GroupKeyOption = Annotated[
    str | None, typer.Option(help="Field naming a row's group [scenario_id; logged rows: task_id, else prompt].")
]
RewardKeyOption = Annotated[str | None, typer.Option(help="Field holding the verifier's reward [reward].")]
TextKeyOption = Annotated[
    str | None, typer.Option(help="Field holding the rollout text [final_text; logged rows: completion].")
]


# Typer declares each option in the signature: the function is long by its options, its body is one screen.
@guarded
def spread(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ROWS] [KEY=VALUE]...",
            help="A .jsonl, .json or .parquet rows file (TRL completion logs too) or a folder of them (default: the "
            "recipe's spread.rows), and key=value overrides of the recipe, e.g. grader.judge.base_url=URL "
            "spread.controls=8.",
        ),
    ] = None,
    recipe: RecipeOption = None,
    grader: GraderOption = None,
    group_key: GroupKeyOption = None,
    reward_key: RewardKeyOption = None,
    text_key: TextKeyOption = None,
    as_json: JsonOption = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="A table per group, and each retry of a judge call with its wait.")
    ] = False,
    skip_bad_rows: Annotated[
        bool, typer.Option("--skip-bad-rows", help="Skip malformed rows (counted) instead of failing.")
    ] = False,
    no_cache: NoCacheOption = False,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            metavar="A:B",
            help="A training run's own completions of steps A to B only (its completions/completions_NNNNN.parquet); "
            "A: or :B leaves that end open.",
        ),
    ] = None,
) -> None:
    """Grade the passes of ROWS and say whether the grader tells them apart.

    Example: whileai spread recipes/refund_rows.jsonl --recipe recipes/refund_scripted.yaml

    Overrides: whileai spread --recipe recipes/refund_judge.yaml grader.judge.base_url=https://api.openai.com/v1
    grader.judge.model=gpt-4o-mini grader.judge.api_key_env=OPENAI_API_KEY

    Besides the spread of the scores, up to spread.controls groups (32) are graded again in a shuffled order with
    copies of one pass: a ranking that follows position, identical passes told apart, or a copy changed on its surface
    alone (filler, markdown, a claim of correctness) scored above its original, is no spread either.

    A run's own rollouts: whileai spread runs/tiny_cpu_gar --window 40:60 (the run's grader unless --recipe or --grader
    names another), where the run's spread watch (watch.jsonl) says the grading went wrong.

    Exit codes: 0 spread; 1 no spread, or too few scores or controls measured; 2 bad input; 3 missing install; 4
    grader unavailable (down, or failing on at least spread.broken_fraction of the groups, 90%: --json lists the
    failures by kind, --debug prints the first traceback); 130 interrupted (Ctrl-C).

    On a terminal a bar on stderr counts the groups judged of those sent (controls included), with a judge's
    completion tokens per second.
    """
    from whileai.config.build import gate_setup
    from whileai.grading.gate import unavailable_report

    given, overrides = rows_and_overrides(arguments)
    setup = gate_setup(recipe, grader, given, overrides, no_cache, say)
    grading, settings, rows = setup.grading, setup.spread, setup.rows
    steps = _steps(window)
    tables: list[Table] = []
    fields, skip_bad = settings.row_fields(group_key, reward_key, text_key), skip_bad_rows or settings.skip_bad_rows
    try:
        with show_log(verbose):
            run = _check(rows, grading, settings, fields, skip_bad, tables if verbose else None, steps)
    except GraderUnavailable as error:
        if not as_json:
            raise  # the one line on stderr and exit 4 (console.guarded)
        err.print(f"whileai: error: {error}", markup=False)
        if is_debug():
            _print_traceback(error)
        print_json({**unavailable_report(error), "grader": grading.figures()})
        raise typer.Exit(GraderUnavailable.exit_code) from None
    say_rows(run.rows, rows)
    if as_json:
        print_json({**run.as_dict(), "grader": grading.figures()})
    else:
        for table in tables:
            out.print(table)
        out.print(str(run.report), markup=False)
        hacks = run.report.hacks
        found = f" in {len(hacks)} group(s) ({', '.join(map(str, list(hacks)[:3]))}{', ...' if len(hacks) > 3 else ''})"
        say(f"whileai: hacks confirmed: {sum(map(len, hacks.values()))}{found if hacks else ''}, zeroed before scoring")
    if run.report.first_error is not None and is_debug():
        err.print("whileai: the first failure's traceback:", markup=False)
        _print_traceback(run.report.first_error)
    if run.report.verdict == "broken":
        raise typer.Exit(GraderUnavailable.exit_code)
    if not run.report.ok:
        raise typer.Exit(1)


def _steps(window: str | None) -> tuple[int, int] | None:
    """``--window A:B`` as ``(A, B)``; an open end is the first or the last step."""
    if window is None:
        return None
    first, colon, last = window.partition(":")
    try:
        steps = (int(first) if first.strip() else 0, int(last) if last.strip() else 10**9)
    except ValueError:
        steps = None
    if not colon or steps is None or steps[0] > steps[1] or steps[0] < 0:
        raise BadInput(f"--window {window!r}: give steps as A:B with 0 <= A <= B (A: or :B leaves an end open)")
    return steps


def _check(
    rows: Path,
    grading: Any,
    settings: Any,
    fields: Any,
    skip_bad: bool,
    tables: list[Table] | None,
    steps: tuple[int, int] | None = None,
) -> Any:
    """The gate on ``rows`` (only the completion logs of ``steps``, when given), with a bar of the groups judged on a
    terminal (a judge's tokens per second beside it) and, when ``tables`` is given, a table per graded group
    collected into it."""
    from whileai.grading.gate import check_spread_file
    from whileai.progress import CounterRateColumn, phase_bar

    def judge_tokens() -> int | None:
        """The completion tokens the HTTP judge was sent back so far (its ``JudgeStats``; other graders keep none)."""
        tokens = getattr(getattr(grading.grader, "stats", None), "tokens_out", None)
        return tokens if isinstance(tokens, int) else None

    columns = [] if judge_tokens() is None else [CounterRateColumn(lambda: judge_tokens() or 0, "judge tok")]
    with phase_bar("grading", "groups", err, columns) as bar:
        task = bar.add_task("grading", total=None)

        def progress(done: int, sent: int) -> None:
            bar.update(task, completed=done, total=sent)

        def on_restart() -> None:
            if tables is not None:
                tables.clear()
            bar.reset(task, total=None)

        return check_spread_file(
            rows,
            grading,
            fields,
            skip_bad=skip_bad,
            progress=progress if err.is_terminal else None,
            on_graded=None if tables is None else lambda group: tables.append(_group_table(group)),
            on_restart=on_restart,
            controls=settings.controls,
            steps=steps,
            seed=settings.seed,
        )


def say_rows(read: Any, rows: Path) -> None:
    """How the reader read the rows, and what it left out, dropped or skipped, on stderr."""
    if read.read_as:
        say(f"whileai: {rows}: {read.read_as} (--group-key, --text-key and --reward-key name others)")
    if read.left_out:
        shown = ", ".join(read.left_out[:4])
        more = f", and {len(read.left_out) - 4} more" if len(read.left_out) > 4 else ""
        say(f"whileai: read {read.files} rows file(s) of {rows}; left out {len(read.left_out)}: {shown}{more}")
    if read.duplicates:
        say(
            f"whileai: dropped {read.duplicates} group(s) read twice: TRL writes one generation into every log "
            "file until the next one (steps_per_generation > 1)"
        )
    if read.skipped:
        first = read.examples[0] if read.examples else ""
        say(f"whileai: skipped {read.skipped} bad row(s) of {read.rows + read.skipped}; first: {first}")


def rows_and_overrides(arguments: list[str] | None) -> tuple[Path | None, list[str]]:
    """The ROWS path (None when not given) and the ``key=value`` overrides among a command's arguments.

    Raises:
        BadInput: more than one ROWS.
    """
    from whileai.config.load import is_override

    overrides = [a for a in arguments or [] if is_override(a)]
    paths = [a for a in arguments or [] if not is_override(a)]
    if len(paths) > 1:
        raise BadInput(f"give one ROWS file or folder, got {len(paths)}: {', '.join(paths)}")
    return (Path(paths[0]) if paths else None), overrides


def _group_table(group) -> Table:
    """Rewards, ranks, factors and hacks of one graded group."""
    from rich.table import Table

    table = Table(title=f"{group.task_id}", title_justify="left", show_edge=False)
    for name in ("i", "R", "rank", "factor", "A'", "note"):
        table.add_column(name, justify="right" if name not in ("note",) else "left")
    # Tied passes share a rank: rank 1 + the number of distinct better factors.
    distinct = sorted(set(group.factors.values()), reverse=True)
    ranks = {i: distinct.index(f) + 1 for i, f in group.factors.items()}
    advantages = group.advantages
    for i, reward in enumerate(group.rewards):
        note = hack_note(group.effective_rewards[i]) if i in group.hacks else ("" if group.passed[i] else "fail")
        factor = f"{group.factors[i]:.3f}" if i in group.factors else ""
        table.add_row(str(i), f"{reward:g}", str(ranks.get(i, "")), factor, f"{advantages[i]:+.3f}", note)
    if group.reason:
        table.caption = f"fell back: {group.reason}"
    return table


def _print_traceback(error: BaseException) -> None:
    """The traceback of a grader's exception, on stderr (``whileai --debug spread ...``)."""
    import traceback

    err.print("".join(traceback.format_exception(error)), markup=False, end="")
