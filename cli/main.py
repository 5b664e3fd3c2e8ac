"""The ``whileai`` console script.

Each command parses its arguments, makes one library call and maps known errors to exit codes (``console.guarded``).
Heavy imports (torch, trl) happen inside the command that needs them, never at import time.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand

import whileai
from whileai.cli import console
from whileai.cli.env import env
from whileai.cli.eval import eval_run
from whileai.cli.judge_eval import judge_eval
from whileai.cli.redistribute import redistribute
from whileai.cli.report import report
from whileai.cli.simulate import simulate
from whileai.cli.spread import spread
from whileai.cli.train import train
from whileai.cli.validate import validate
from whileai.errors import DISTRIBUTION

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 the spread gate found no spread; 2 bad input (usage, recipe, rows); "
    "3 a missing optional install; 4 the grader or a model endpoint is unavailable; 5 the spread watch stopped "
    "training (whileai train); 130 interrupted (Ctrl-C); 143 ended by SIGTERM, as by Ctrl-C."
)

app = typer.Typer(
    name="whileai",
    help=(
        "Groupwise grading for GRPO: a grader that tells passing rollouts apart.\n\n"
        "Example: whileai spread recipes/refund_rows.jsonl --recipe recipes/refund_scripted.yaml\n\n" + EXIT_CODES_HELP
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"whileai {whileai.__version__} ({DISTRIBUTION})")  # the distribution: spread_gate.sh reads it
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors."),
) -> None:
    """Groupwise grading for GRPO."""
    console.set_debug(debug)


class _Command(TyperCommand):
    """A command whose usage line shows each argument's metavar as written (``RECIPE [KEY=VALUE]...``), where Typer
    would wrap it again (``{RECIPE} [[KEY=VALUE]...]...``)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument) and param.metavar:
                pieces.append(param.metavar)
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


# Each command's line in `whileai --help`: short enough not to be cut at 80 columns.
COMMANDS = (
    ("spread", spread, "Does the grader tell passes apart? The spread gate."),
    ("redistribute", redistribute, "Equation 3 on one group's rewards and ranking."),
    ("simulate", simulate, "Simulated support conversations, as graded rows."),
    ("validate", validate, "Check a recipe, importing no torch."),
    ("train", train, "The spread gate, then GRPO with TRL and the grader."),
    ("eval", eval_run, "A trained run on held-out prompts: pass rate, grader."),
    ("report", report, "Compare runs: pass rate, length and grading."),
    ("judge-eval", judge_eval, "Measure a grader against a known reference."),
    ("env", env, "The versions and machine a bug report needs."),
)
for name, command, summary in COMMANDS:
    app.command(name, cls=_Command, short_help=summary)(command)


def main() -> None:
    """Entry point of the ``whileai`` console script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
