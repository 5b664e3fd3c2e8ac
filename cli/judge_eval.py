"""``whileai judge-eval``: is the grader right? Its ranking and its hacks against rows whose quality is known."""

from __future__ import annotations

from typing import Annotated

import typer

from whileai.cli.console import err, guarded, out, print_json, say
from whileai.cli.spread import (
    GraderOption,
    GroupKeyOption,
    JsonOption,
    NoCacheOption,
    RecipeOption,
    RewardKeyOption,
    TextKeyOption,
    rows_and_overrides,
    say_rows,
)
from whileai.errors import GraderUnavailable


@guarded
def judge_eval(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ROWS] [KEY=VALUE]...",
            help="Rows whose 'quality' (higher is better) or 'reference_rank' (1 is best) is known, and optionally "
            "'hack': a .jsonl, .json or .parquet file or a folder (default: the recipe's spread.rows); and key=value "
            "overrides of the recipe, e.g. grader.judge.base_url=URL.",
        ),
    ] = None,
    recipe: RecipeOption = None,
    grader: GraderOption = None,
    group_key: GroupKeyOption = None,
    reward_key: RewardKeyOption = None,
    text_key: TextKeyOption = None,
    as_json: JsonOption = False,
    no_cache: NoCacheOption = False,
) -> None:
    """Measure a grader against a known reference: does it order the passes right and find the hacks?

    Example: whileai simulate -o rows.jsonl && whileai judge-eval rows.jsonl --recipe recipes/refund_scripted.yaml

    Prints Kendall's tau-b between the grader's scores of the passes and the reference per group (mean, 95% bootstrap
    interval over groups, n), hack recall and precision, its agreement with itself when each group is shown again
    shuffled with copies of one pass (how often an injected copy or one changed on its surface alone rose above it), the
    cost per group (calls, tokens and latency for a judge), and its failures.

    Exit codes: 0 report printed; 2 bad input (no reference field in the rows); 3 missing install; 4 grader
    unavailable (down, or failing on at least spread.broken_fraction of the groups, 90%); 130 interrupted (Ctrl-C).
    """
    from whileai.config.build import gate_setup
    from whileai.grading.evaluate import evaluate_grader, read_reference
    from whileai.progress import phase_bar
    from whileai.rows import RowStats

    given, overrides = rows_and_overrides(arguments)
    # The reference rows are graded by the recipe or --grader named, else the built-in rule: a run folder's grader
    # is for whileai spread RUN (its completions carry no reference).
    setup = gate_setup(recipe, grader, given, overrides, no_cache, say, run_grader=False)
    grading, settings, rows, read = setup.grading, setup.spread, setup.rows, RowStats()
    groups = read_reference(rows, settings.row_fields(group_key, reward_key, text_key), stats=read)
    say_rows(read, rows)
    with phase_bar("grading", "groups", err) as bar:
        task = bar.add_task("grading", total=len(groups))
        report = evaluate_grader(grading, groups, seed=settings.seed, progress=lambda n: bar.advance(task, n))

    if as_json:
        print_json(report.as_dict())
    else:
        out.print(str(report), markup=False)
    if report.broken:
        raise typer.Exit(GraderUnavailable.exit_code)
