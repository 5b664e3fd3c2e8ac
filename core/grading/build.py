"""From a recipe's ``grader`` and ``grading`` sections to a ready ``GroupwiseGrading``.

``build_grading`` is the one place where a grader section becomes a callable: a scripted rule, your function, or
the HTTP judge. ``grader_from_spec`` does the same for the command line's ``--grader SPEC``. Nothing here calls the
grader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from whileai.config.load import LoadedRecipe, validate_recipe
from whileai.config.schema import (
    GraderSection,
    GradingSection,
    JudgeGraderSection,
    PythonGraderSection,
    ScriptedGraderSection,
    ScriptedRule,
)
from whileai.errors import BadInput
from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.reference import load_callable
from whileai.grading.scripted import ScriptedGrader

__all__ = ["build_grader", "build_grading", "grader_from_spec"]


def _read_mapping(path: Path, what: str) -> Any:
    if not path.is_file():
        raise BadInput(f"{what}: no such file {path}")
    try:
        text = path.read_text()
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise BadInput(f"{path}: cannot parse {what} ({err})") from None


def build_grader(
    section: GraderSection, grading: GradingSection, base_dir: Path, rubrics_path: Path | None = None
) -> Any:
    """The grader callable a grader section describes, for the grading mode.

    ``rubrics_path`` is where a judge keeps the rubrics it writes in reward mode (the run directory's
    ``rubrics.json``).
    """
    if isinstance(section, ScriptedGraderSection):
        scripted = ScriptedGrader(section.rule)
        return scripted.score if grading.mode == "reward" else scripted
    if isinstance(section, PythonGraderSection):
        function = load_callable(section.function, base_dir, what="grader")
        if section.thread_safe and not getattr(function, "thread_safe", False):
            function = _thread_safe(function)
        return function
    if isinstance(section, JudgeGraderSection):
        from whileai.judge import build_judge

        return build_judge(section.judge, mode=grading.mode, base_dir=base_dir, rubrics_path=rubrics_path)
    raise BadInput(f"unknown grader kind {section!r}")  # pragma: no cover - the schema rejects it first


def _thread_safe(function: Any) -> Any:
    """``function`` marked thread-safe (``GroupwiseGrading`` then grades groups concurrently), its name kept."""

    def grader(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    grader.__name__ = getattr(function, "__name__", "grader")
    grader.thread_safe = True  # type: ignore[attr-defined]
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
    loaded: LoadedRecipe, grader: Any | None = None, rubrics_path: Path | None = None
) -> GroupwiseGrading:
    """The recipe's ``GroupwiseGrading``: its grader (or ``grader`` when given) with the grading and spread knobs.

    In reward mode with no rubrics in the recipe, a grader that writes its own (the judge's ``rubric_writer``)
    supplies them, kept at ``rubrics_path``.
    """
    recipe = loaded.recipe
    if grader is None:
        if recipe.grader is None:
            raise BadInput(f"{loaded.path or 'the recipe'}: no grader section (and no --grader given)")
        grader = build_grader(recipe.grader, recipe.grading, loaded.base_dir, rubrics_path)
    grading = recipe.grading
    rubrics = _rubrics(grading, loaded.base_dir)
    if rubrics is None and grading.mode == "reward":
        rubrics = getattr(grader, "rubric_writer", None)
    return GroupwiseGrading(
        grader=grader,
        mode=grading.mode,
        cap=grading.cap,
        min_factor=grading.min_factor,
        hack_zero=grading.hack_zero,
        hack_reward=grading.hack_reward,
        floor=grading.floor,
        rubrics=rubrics,
        spread=recipe.spread.thresholds(),
        timeout_s=grading.timeout_s,
    )


def grader_from_spec(spec: str, grading: GradingSection, base_dir: Path | None = None) -> Any:
    """A grader from ``--grader SPEC``: ``module:function``, ``file.py:function``, or a rule file (.yaml/.json).

    A rule file holds a scripted rule (``measure: matches ...``), a grader section (``kind: ...``), or a whole
    recipe with a ``grader`` section.
    """
    base = base_dir or Path.cwd()
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") and ":" not in path.name:
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
        try:
            rule = ScriptedRule.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise BadInput(f"{path}: {where}: {first['msg']}") from None
        scripted = ScriptedGrader(rule, name=path.stem)
        return scripted.score if grading.mode == "reward" else scripted
    return load_callable(spec, base, what="grader")
