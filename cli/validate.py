"""``whileai validate``: a recipe checked without importing torch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from whileai.cli.console import guarded, out, say
from whileai.errors import BadInput

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[KEY=VALUE]...", help="key=value overrides, e.g. trainer.learning_rate=1e-5 grading.cap=2."
    ),
]


@guarded
def validate(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE", help="The recipe YAML.")],
    overrides: Overrides = None,
    print_recipe: Annotated[
        bool, typer.Option("--print", help="Print the resolved recipe on stdout (the verdict then goes to stderr).")
    ] = False,
) -> None:
    """Check a recipe without importing torch: schema and types (TRL's own for the trainer section), built-in names,
    batch arithmetic, includes, overrides, referenced files and functions, and that the grader and the verifier can
    be called as training calls them (the verifier with the dataset's columns, where they can be read here).

    Example: whileai validate recipes/refund_scripted.yaml grading.cap=2 --print

    Exit codes: 0 valid; 2 bad recipe (the message names the YAML path and what is allowed); 130 interrupted.
    """
    from whileai.config import load_recipe
    from whileai.config.build import check_references, task_setup
    from whileai.tasks.load import check_verifier

    loaded = load_recipe(recipe, overrides or [])
    check_references(loaded)
    if loaded.recipe.data is not None and loaded.recipe.verifier is not None:
        check_verifier(task_setup(loaded))  # the verifier against the dataset's columns, as training checks it
    if loaded.recipe.model is not None and (problems := loaded.recipe.training_problems()):
        raise BadInput(f"{recipe}: {problems[0]}")  # a training recipe: what whileai train would refuse
    if print_recipe:
        out.print(loaded.dump(), markup=False, end="")
    # Every section the recipe (with its includes and overrides) sets; the others keep their defaults.
    sections = [name for name in type(loaded.recipe).model_fields if name in loaded.resolved and name != "include"]
    verdict = f"whileai: {recipe} is valid (sections: {', '.join(sections) or 'defaults only'})"
    # The result on stdout; with --print the resolved YAML is the result, and stdout stays a YAML file.
    (say if print_recipe else _result)(verdict)


def _result(message: str) -> None:
    out.print(message, markup=False)
