"""``whileai train``: the spread gate, then TRL's GRPOTrainer with the recipe's grader; ``--dry-run`` says the plan."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from whileai.cli.console import err, guarded, is_debug, out, say
from whileai.cli.validate import Overrides
from whileai.defaults import VERIFIER_BROKEN_BATCHES
from whileai.errors import GraderUnavailable, WatchStopped
from whileai.isolation import end_all

if TYPE_CHECKING:
    from whileai.training.run import TrainingResult


@guarded
def train(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE", help="The recipe YAML.")],
    overrides: Overrides = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the resolved recipe and the plan; import no torch.")
    ] = False,
    skip_spread_gate: Annotated[
        bool, typer.Option("--skip-spread-gate", help="Train even when the spread gate fails (recorded in the run).")
    ] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint of the run.")] = False,
) -> None:
    """Train with TRL's GRPOTrainer and the recipe's groupwise grader, after the spread gate.

    Example: whileai train recipes/tiny_cpu_gar.yaml trainer.max_steps=5

    Exit codes: 0 trained; 1 no spread; 2 bad recipe; 3 torch/trl missing (pip install 'whileai-grpo[train]');
    4 grader unavailable, or the verifier scored none of 3 batches in a row (stopped at a checkpoint); 5 the spread
    watch stopped training (spread.watch.on_fail: stop); 130 interrupted (Ctrl-C: the message says how to resume);
    143 SIGTERM, as Ctrl-C.
    """
    from whileai.config import load_recipe
    from whileai.config.build import train_setup

    setup = train_setup(load_recipe(recipe, overrides or []))
    if dry_run:
        from whileai.training.run import dry_run as planned

        plan = planned(setup)
        out.print(plan.shown, markup=False, end="")
        table = Table(title="plan", title_justify="left", show_edge=False, show_header=False)
        table.add_column("step")
        table.add_column("what")
        for step, what in plan.steps:
            table.add_row(step, what)
        out.print(table)
        return
    from whileai.training.run import RunInterrupted, first_process, run_training

    try:
        result = run_training(setup, skip_spread_gate=skip_spread_gate, resume=resume, say=say)
    except RunInterrupted as interrupted:
        # The command as it was given, every flag and override kept, plus --resume.
        again = ["whileai", *(["--debug"] if is_debug() else []), "train", str(recipe), *(overrides or [])]
        again += [*(["--skip-spread-gate"] if skip_spread_gate else []), "--resume"]
        if interrupted.checkpoint is None:
            where = " before the first checkpoint (a resume starts the run over)"
        else:
            where = f"; {interrupted.checkpoint[0]} is the newest checkpoint"
        end_all()
        say(f"whileai: interrupted ({interrupted.said}){where}. Continue with: {shlex.join(again)}")
        raise typer.Exit(interrupted.exit_code) from None
    # Under accelerate or torchrun every process gets here; only the first one says how the run ended, on stdout
    # (the result; the progress above it went to stderr).
    message, code = _outcome(result)
    if first_process():
        if result.verifier_trace and is_debug():
            err.print(f"whileai: the verifier's latest failure:\n{result.verifier_trace}", markup=False, end="")
        out.print(message, markup=False)
    if code:
        raise typer.Exit(code)


def _outcome(result: TrainingResult) -> tuple[str, int]:
    """How the run ended, in one line, and the exit code."""
    if result.spread_failed:
        if result.spread_verdict == "broken":
            return (
                "whileai: the spread gate's grader is broken or unreachable: not training (--skip-spread-gate trains "
                "anyway, each group whose grading fails keeping its verifier rewards)"
            ), GraderUnavailable.exit_code
        found = "had too few to judge" if result.spread_verdict == "too few" else "found no spread"
        return f"whileai: the spread gate {found}: not training (--skip-spread-gate to train anyway)", 1
    if result.finished is not None:
        done, target = result.finished
        return (
            f"whileai: this run is finished ({done} of {target} steps); nothing changed in {result.output_dir} "
            "(raise trainer.max_steps to train on)"
        ), 0
    if result.watch_stopped is not None:
        step = result.watch_stopped["step"]
        return (
            f"whileai: the spread watch stopped training at step {step} ({result.watch_stopped['why']}); "
            f"checkpoint-{step} is in {result.output_dir}. Change the recipe's grader, then continue with --resume"
        ), WatchStopped.exit_code
    if result.verifier_stopped is not None:
        step = result.verifier_stopped["step"]
        return (
            f"whileai: the verifier scored none of the completions of {VERIFIER_BROKEN_BATCHES} batches in a row, "
            f"training stopped at step {step}: {result.verifier_stopped['why']}; checkpoint-{step} is in "
            f"{result.output_dir}. Fix the verifier, then continue with --resume"
        ), GraderUnavailable.exit_code
    # The grader failed on most groups, the verifier left completions unscored: said where the outcome is said.
    how = f", {result.plain}" if result.plain else ""
    if (verifier := result.verifier or {}).get("unscored"):
        how += f", {verifier['unscored']} of {verifier['completions']} completions unscored by the verifier"
        how += f" ({verifier['failures']} failed)" if verifier["failures"] else ""
    stop = ". To stop such a run at a checkpoint instead: spread.watch.on_fail=stop" if result.plain else ""
    return f"whileai: trained {result.steps} steps{how}; the run is in {result.output_dir}{stop}", 0
