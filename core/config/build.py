"""From a recipe to the objects that run it: the grader, the ``GroupwiseGrading`` around it, the judge's client.

The one place where a recipe's ``grader``, ``grading`` and ``spread`` sections become a ``GroupwiseGrading``, for
every caller: ``whileai spread``, ``whileai judge-eval``, ``whileai train`` (its gate and its reward function share
one) and verl's reward manager.

- ``build_grading``: the recipe's grader (or one given), with the recipe's knobs and thresholds; a judge says its
  plan (where it is, how many calls at once) through ``say``.
- ``recipe_grading``: what the command line grades with: ``--grader``, else the recipe's grader, else the built-in
  rule, each choice said.
- ``grader_from_spec``: ``--grader SPEC`` (a function or a rule file) as a grader callable.
- ``rows_to_grade``: the rows the command line was given, else the recipe's ``spread.rows``.
- ``check_references``: the files and functions a recipe names exist, before anything runs.

Nothing here calls a grader. This module sits above ``whileai.config``, ``whileai.grading`` and ``whileai.judge``,
which import none of it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from whileai.config.load import LoadedRecipe, default_recipe, load_recipe, validate_recipe
from whileai.config.machine import check_machine
from whileai.config.schema import (
    GraderSection,
    GradingSection,
    JudgeGraderSection,
    PythonGraderSection,
    ScriptedGraderSection,
)
from whileai.defaults import DEFAULT_GRADER_RULE
from whileai.errors import BadInput
from whileai.grading.calls import check_grader_call
from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.reference import load_callable
from whileai.grading.scripted import ScriptedGrader
from whileai.yamldata import read_yaml_file

__all__ = [
    "build_grader",
    "build_grading",
    "check_references",
    "grader_from_spec",
    "judge_plan",
    "recipe_grading",
    "rows_to_grade",
]

Say = Callable[[str], None]


def _read_mapping(path: Path, what: str) -> Any:
    if not path.is_file():
        raise BadInput(f"{what}: no such file {path}")
    if path.suffix != ".json":
        return read_yaml_file(path, what)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadInput(f"{path}: cannot parse {what} ({err})") from None


def build_grader(
    section: GraderSection, grading: GradingSection, base_dir: Path, rubrics_path: Path | None = None
) -> Any:
    """The grader callable a grader section describes, for the grading mode.

    ``rubrics_path`` is where a judge keeps the rubrics it writes in reward mode (the run directory's
    ``rubrics.json``).
    """
    if isinstance(section, ScriptedGraderSection):
        return ScriptedGrader(section.rule)  # grade_groups in advantage mode, score_passes in reward mode
    if isinstance(section, PythonGraderSection):
        function = load_callable(section.function, base_dir, what="grader")
        if section.thread_safe or section.in_process:
            function = _marked(function, section.thread_safe, section.in_process)
        return function
    if isinstance(section, JudgeGraderSection):
        from whileai.judge import build_judge  # the HTTP judge's modules load only for a judge

        return build_judge(section.judge, mode=grading.mode, base_dir=base_dir, rubrics_path=rubrics_path)
    raise BadInput(f"unknown grader kind {section!r}")  # pragma: no cover - the schema rejects it first


def _marked(function: Any, thread_safe: bool, in_process: bool) -> Any:
    """``function`` marked as the recipe says (``GroupwiseGrading`` grades groups at once for a thread-safe grader,
    and in its own process for an ``in_process`` one), its name and signature kept, the user's function untouched."""

    @functools.wraps(function)
    def grader(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    grader.thread_safe = thread_safe or getattr(function, "thread_safe", False) is True  # type: ignore[attr-defined]
    grader.in_process = in_process or getattr(function, "in_process", False) is True  # type: ignore[attr-defined]
    return grader


def _rubrics(grading: GradingSection, base_dir: Path) -> Any:
    rubrics = grading.rubrics
    if isinstance(rubrics, str):
        path = Path(rubrics) if Path(rubrics).is_absolute() else base_dir / rubrics
        rubrics = _read_mapping(path, "rubrics")
        if not isinstance(rubrics, dict):
            raise BadInput(f"{path}: rubrics must be a mapping task_id -> rubric")
    return rubrics


def build_grading(
    loaded: LoadedRecipe, grader: Any | None = None, *, rubrics_path: Path | None = None, say: Say | None = None
) -> GroupwiseGrading:
    """The recipe's ``GroupwiseGrading``: its grader (or ``grader`` when given) with the grading and spread knobs.

    In reward mode with no rubrics in the recipe, a grader that writes its own (the judge's ``rubric_writer``)
    supplies them, kept at ``rubrics_path``. With ``say``, a judge's plan line is said (the judge asks its server
    how many calls it runs at once when the recipe leaves that to it).

    Raises:
        BadInput: no grader section and none given, or a grader section that cannot be built.
    """
    recipe = loaded.recipe
    if grader is None:
        if recipe.grader is None:
            raise BadInput(f"{loaded.path or 'the recipe'}: no grader section (and no --grader given)")
        grader = build_grader(recipe.grader, recipe.grading, loaded.base_dir, rubrics_path)
    knobs = recipe.grading
    grading = GroupwiseGrading(
        grader=grader,
        **knobs.values(),
        rubrics=_rubrics(knobs, loaded.base_dir),
        spread=recipe.spread.thresholds(),
    )
    if say is not None and (plan := judge_plan(grading)) is not None:
        say(f"whileai: {plan}")
    return grading


def judge_plan(grading: GroupwiseGrading) -> str | None:
    """The plan line of a judge grader (where it is, how many calls at once and why, the timeouts, the answer form);
    None for any other grader, and nothing of the judge is imported for one."""
    client = getattr(grading.grader, "client", None)
    if client is None:
        return None
    from whileai.judge.client import JudgeClient

    return client.plan() if isinstance(client, JudgeClient) else None


def recipe_grading(
    recipe: Path | None, grader: str | None, overrides: list[str], no_cache: bool, say: Say
) -> tuple[LoadedRecipe, GroupwiseGrading]:
    """What the command line grades with: the loaded recipe (``recipe`` with ``overrides``, or the built-in defaults)
    and its ``GroupwiseGrading``, whose grader is ``--grader`` if given, else the recipe's, else (with neither a
    recipe nor ``--grader``) the built-in rule; each choice is said through ``say``, as is a judge's plan.
    ``no_cache`` makes a judge ask again.

    Raises:
        BadInput: a recipe without a grader section and no ``--grader``: the built-in rule stands in only where no
            recipe was named, never for a recipe's missing grader.
    """
    if recipe is not None:
        loaded = load_recipe(recipe, overrides)
        if no_cache and loaded.recipe.grader is not None and loaded.recipe.grader.kind == "judge":
            loaded = load_recipe(recipe, [*overrides, "grader.judge.no_cache=true"])
    else:
        loaded = default_recipe(overrides)
    if grader is not None:
        if loaded.recipe.grader is not None:
            say(f"whileai: --grader {grader} replaces the recipe's grader ({loaded.recipe.grader.kind})")
        return loaded, build_grading(loaded, grader_from_spec(grader, loaded.recipe.grading))
    if loaded.recipe.grader is not None:
        return loaded, build_grading(loaded, say=say)
    if recipe is not None:
        raise BadInput(
            f"{recipe}: this recipe has no grader section: add one (grader: kind: scripted | python | judge), "
            "or name one with --grader"
        )
    say(f"whileai: no grader given: using the built-in rule {DEFAULT_GRADER_RULE} (fewest tool calls first)")
    # The shipped rule itself, not a file of that name that happens to sit in the working directory.
    rule = Path(str(resources.files("whileai.configs"))) / DEFAULT_GRADER_RULE
    return loaded, build_grading(loaded, grader_from_spec(str(rule), loaded.recipe.grading))


def rows_to_grade(loaded: LoadedRecipe, given: Path | None) -> Path:
    """The rows the command line names, else the recipe's ``spread.rows`` (resolved against the recipe's folder).

    Raises:
        BadInput: neither gives any.
    """
    if given is not None:
        return given
    if loaded.recipe.spread.rows is None:
        raise BadInput("give ROWS, or a recipe whose spread.rows names them")
    return loaded.resolve(loaded.recipe.spread.rows)


def grader_from_spec(spec: str, grading: GradingSection, base_dir: Path | None = None) -> Any:
    """A grader from ``--grader SPEC``: ``module:function``, ``file.py:function``, or a rule file (.yaml/.json).

    A rule file holds a scripted rule (``measure: matches ...``), a grader section (``kind: ...``), or a whole
    recipe with a ``grader`` section.
    """
    base = base_dir or Path.cwd()
    path = Path(spec)
    if not (path.suffix in (".yaml", ".yml", ".json") and ":" not in path.name):
        return load_callable(spec, base, what="grader")
    if not path.is_absolute():
        path = base / path
    data = _read_mapping(path, "grader rule file") or {}
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a rule file holds a mapping")
    if "grader" in data:
        recipe = validate_recipe(data, str(path))
        assert recipe.grader is not None
        return build_grader(recipe.grader, grading, path.parent)
    if "kind" in data:
        try:
            section = TypeAdapter(GraderSection).validate_python(data)
        except ValidationError as err:
            raise BadInput(f"{path}: {err.errors()[0]['msg']}") from None
        return build_grader(section, grading, path.parent)
    if set(data) == {"rule"} and isinstance(data["rule"], dict):
        data = data["rule"]  # a recipe's grader.rule copied with its key
    # Checked as a recipe's rule is, so a misspelt key gets the same did-you-mean.
    recipe = validate_recipe({"grader": {"kind": "scripted", "rule": data}}, str(path))
    assert isinstance(recipe.grader, ScriptedGraderSection)
    return ScriptedGrader(recipe.grader.rule, name=path.stem)


def _references(loaded: LoadedRecipe) -> list[tuple[str, Path]]:
    """Files the recipe names that must exist before anything runs."""
    return [(name, loaded.resolve(path)) for name, path in loaded.recipe.local_files(loaded.base_dir)]


def _functions(loaded: LoadedRecipe) -> list[tuple[str, str]]:
    recipe = loaded.recipe
    named = (
        ("grader.function", getattr(recipe.grader, "function", None)),
        ("verifier.function", getattr(recipe.verifier, "function", None)),
        ("data.environment", getattr(recipe.data, "environment", None)),
    )
    return [(name, reference) for name, reference in named if reference]


def check_references(loaded: LoadedRecipe) -> None:
    """The files a recipe names exist, and the functions it names resolve (their modules are imported).

    Raises:
        BadInput: naming the recipe, the field and what is missing.
    """
    for name, path in _references(loaded):
        if not path.exists():
            raise BadInput(f"{loaded.path}: {name}: no such file {path}")
    check_machine(loaded.recipe, str(loaded.path))
    for name, reference in _functions(loaded):
        try:
            function = load_callable(reference, loaded.base_dir, what=name)
            if name == "grader.function":
                check_grader_call(function, loaded.recipe.grading.mode)
        except BadInput as error:
            raise BadInput(f"{loaded.path}: {error}") from None
