"""``whileai validate`` and ``whileai train``: recipes checked without importing torch, and the training run."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from whileai.cli.console import guarded, is_debug, out, say
from whileai.errors import BadInput, GraderUnavailable

Overrides = Annotated[
    list[str] | None, typer.Argument(help="key=value overrides, e.g. trainer.learning_rate=1e-5 grading.cap=2.")
]


def _referenced_files(loaded) -> list[tuple[str, Path]]:
    """Files the recipe names that must exist before anything runs."""
    recipe = loaded.recipe
    files = []
    if recipe.spread.rows:
        files.append(("spread.rows", loaded.resolve(recipe.spread.rows)))
    if isinstance(recipe.grading.rubrics, str):
        files.append(("grading.rubrics", loaded.resolve(recipe.grading.rubrics)))
    for name, reference in (
        ("grader.function", getattr(recipe.grader, "function", None)),
        ("verifier.function", getattr(recipe.verifier, "function", None)),
    ):
        if reference and reference.rpartition(":")[0].endswith(".py"):
            files.append((name, loaded.resolve(reference.rpartition(":")[0])))
    if recipe.data is not None and not recipe.data.dataset.startswith("builtin:"):
        files.append(("data.dataset", loaded.resolve(recipe.data.dataset)))
    return files


def _check_files(loaded) -> None:
    """Files the recipe names exist, and the functions it names resolve (their modules are imported)."""
    from whileai.grading.reference import load_callable

    for name, path in _referenced_files(loaded):
        if not path.exists():
            raise BadInput(f"{loaded.path}: {name}: no such file {path}")
    recipe = loaded.recipe
    for name, reference in (
        ("grader.function", getattr(recipe.grader, "function", None)),
        ("verifier.function", getattr(recipe.verifier, "function", None)),
    ):
        if reference:
            try:
                load_callable(reference, loaded.base_dir, what=name)
            except BadInput as error:
                raise BadInput(f"{loaded.path}: {error}") from None


@guarded
def validate(
    recipe: Annotated[Path, typer.Argument(help="The recipe YAML.")],
    overrides: Overrides = None,
    print_recipe: Annotated[bool, typer.Option("--print", help="Print the resolved recipe.")] = False,
) -> None:
    """Check a recipe without importing torch: schema and types (TRL's own for the trainer section), built-in names,
    batch arithmetic, includes, overrides, referenced files and functions.

    Example: whileai validate recipes/refund_scripted.yaml grading.cap=2 --print

    Exit codes: 0 valid; 2 bad recipe (the message names the YAML path and what is allowed); 130 interrupted.
    """
    from whileai.config import load_recipe

    loaded = load_recipe(recipe, overrides or [])
    _check_files(loaded)
    if print_recipe:
        out.print(loaded.dump(), markup=False, end="")
    # Every section the recipe (with its includes and overrides) sets; the others keep their defaults.
    sections = [name for name in type(loaded.recipe).model_fields if name in loaded.resolved and name != "include"]
    say(f"whileai: {recipe} is valid (sections: {', '.join(sections) or 'defaults only'})")


@guarded
def train(
    recipe: Annotated[Path, typer.Argument(help="The recipe YAML.")],
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

    Exit codes: 0 trained; 1 no spread; 2 bad recipe; 3 torch/trl missing (pip install 'whileai[train]');
    4 grader unavailable; 130 interrupted (Ctrl-C: the message says how to resume).
    """
    from whileai.config import load_recipe
    from whileai.training.plan import training_plan

    loaded = load_recipe(recipe, overrides or [])
    loaded.recipe.require("model", "data", "verifier", command="train")
    _check_files(loaded)
    plan = training_plan(loaded)
    if dry_run:
        out.print(loaded.dump(), markup=False, end="")
        table = Table(title="plan", title_justify="left", show_edge=False, show_header=False)
        table.add_column("step")
        table.add_column("what")
        for step, what in plan.lines():
            table.add_row(step, what)
        out.print(table)
        return
    from whileai.training.folder import last_checkpoint
    from whileai.training.run import first_process, run_training

    try:
        result = run_training(loaded, skip_spread_gate=skip_spread_gate, resume=resume, say=say)
    except KeyboardInterrupt:
        checkpoint = last_checkpoint(Path(loaded.recipe.output_dir))
        # The command as it was given, every flag and override kept, plus --resume.
        again = ["whileai", *(["--debug"] if is_debug() else []), "train", str(recipe), *(overrides or [])]
        again += [*(["--skip-spread-gate"] if skip_spread_gate else []), "--resume"]
        if checkpoint is None:
            where = " before the first checkpoint (a resume starts the run over)"
        else:
            where = f"; {checkpoint[0]} is the newest checkpoint"
        say(f"whileai: interrupted{where}. Continue with: {shlex.join(again)}")
        raise typer.Exit(130) from None
    # Under accelerate or torchrun every process gets here; only the first one says how the run ended.
    tell = say if first_process() else _quiet
    if result.spread_failed:
        if result.spread_verdict == "broken":
            tell("whileai: the grader failed on (nearly) every group of the spread gate: not training")
            raise typer.Exit(GraderUnavailable.exit_code)
        tell("whileai: the spread gate found no spread: not training (--skip-spread-gate to train anyway)")
        raise typer.Exit(1)
    tell(f"whileai: trained {result.steps} steps; the run is in {result.output_dir}")


def _quiet(message: str) -> None:
    """``say`` for a process that is not the first of a launch: nothing."""
