"""From a recipe to the objects that run it: the one place where a recipe is read for what it builds.

Commands load a recipe (``whileai.config.load``) and hand it here; what they pass on to the application is built
here and holds no recipe:

- ``GateSetup``: what ``whileai spread`` and ``whileai judge-eval`` grade with and read (``gate_setup``);
- ``TaskSetup``: a recipe's task and verifier (``task_setup``), what ``whileai.tasks`` takes;
- ``TrainSetup``: a training run, a ``TaskSetup`` with the rest of the run (``train_setup``; ``run_setup`` reads a run
  folder's own recipe for ``whileai eval``), what ``whileai.training`` takes; its ``make_grading`` builds the run's
  ``GroupwiseGrading``.

The pieces:

- ``build_grading``: the recipe's grader (or one given), with the recipe's knobs and thresholds; a judge says its
  plan (where it is, how many calls at once) through ``say``.
- ``grader_from_spec``: ``--grader SPEC`` (a function or a rule file) as a grader callable.
- ``grader_recipe_of``: the recipe a run folder keeps, for ``whileai spread RUN``.
- ``check_references``: the files and functions a recipe names exist, before anything runs.

Nothing here calls a grader. This module sits above ``whileai.config``, ``whileai.grading`` and ``whileai.judge``,
which import none of it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from whileai.config.load import LoadedRecipe, default_recipe, load_recipe, resolve_path, validate_recipe
from whileai.config.machine import check_machine
from whileai.config.schema import (
    DataSection,
    GraderSection,
    GradingSection,
    JudgeGraderSection,
    ModelSection,
    PythonGraderSection,
    ScriptedGraderSection,
    SimulateSection,
    SpreadSection,
    VerifierSection,
)
from whileai.config.trainer import TrainerSection
from whileai.defaults import DEFAULT_GRADER_RULE
from whileai.errors import BadInput
from whileai.grading.calls import check_grader_call
from whileai.grading.groupwise import GroupwiseGrading
from whileai.grading.reference import load_callable
from whileai.grading.scripted import ScriptedGrader
from whileai.yamldata import read_yaml_file

__all__ = [
    "GateSetup",
    "TaskSetup",
    "TrainSetup",
    "build_grading",
    "check_references",
    "gate_setup",
    "grader_from_spec",
    "grader_recipe_of",
    "run_setup",
    "task_setup",
    "train_setup",
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
    return _grading(
        recipe.grader, recipe.grading, recipe.spread, loaded.base_dir, str(loaded.path or "the recipe"), grader,
        rubrics_path, say,
    )  # fmt: skip


def _grading(
    section: GraderSection | None,
    knobs: GradingSection,
    spread: SpreadSection,
    base_dir: Path,
    where: str,
    grader: Any | None = None,
    rubrics_path: Path | None = None,
    say: Say | None = None,
) -> GroupwiseGrading:
    if grader is None:
        if section is None:
            raise BadInput(f"{where}: no grader section (and no --grader given)")
        grader = build_grader(section, knobs, base_dir, rubrics_path)
    grading = GroupwiseGrading(
        grader=grader, **knobs.values(), rubrics=_rubrics(knobs, base_dir), spread=spread.thresholds()
    )
    if say is not None and (plan := judge_plan(grading)) is not None:
        say(f"whileai: {plan}")
    return grading


def judge_plan(grading: GroupwiseGrading) -> str | None:
    """The plan line of a judge grader (where it is, how many calls at once and why, the timeouts, the answer form);
    None for any other grader, and nothing of the judge is imported for one."""
    client = getattr(grading.grader, "client", None)
    # whileai's own judge client, known without importing the judge's modules for another grader
    return client.plan() if type(client).__module__ == "whileai.judge.client" else None


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


def check_references(loaded: LoadedRecipe) -> None:
    """The files a recipe names exist, and the functions it names resolve (their modules are imported).

    Raises:
        BadInput: naming the recipe, the field and what is missing.
    """
    for name, relative in loaded.recipe.local_files(loaded.base_dir):
        if not (path := loaded.resolve(relative)).exists():
            raise BadInput(f"{loaded.path}: {name}: no such file {path}")
    check_machine(loaded.recipe, str(loaded.path))
    for name, reference in loaded.recipe.functions():
        try:
            function = load_callable(reference, loaded.base_dir, what=name)
            if name == "grader.function":
                check_grader_call(function, loaded.recipe.grading.mode)
        except BadInput as error:
            raise BadInput(f"{loaded.path}: {error}") from None


@dataclass(frozen=True)
class GateSetup:
    """What ``whileai spread`` and ``whileai judge-eval`` grade with and read, from the recipe and the command line.

    Attributes:
        grading: the ``GroupwiseGrading`` (``gate_setup``'s choice of grader).
        rows: the rows to grade (the command line's, else the recipe's ``spread.rows``).
        spread: the recipe's spread section (row fields, controls, seed, ``skip_bad_rows``).
    """

    grading: GroupwiseGrading
    rows: Path
    spread: SpreadSection


def gate_setup(
    recipe: Path | None,
    grader: str | None,
    rows: Path | None,
    overrides: list[str],
    no_cache: bool,
    say: Say,
    *,
    run_grader: bool = True,
) -> GateSetup:
    """What the command line grades with and reads, each choice said through ``say``.

    - The recipe: ``recipe`` with ``overrides``; with ``run_grader``, neither a recipe nor ``--grader`` and ``rows``
      a run folder trained with a grader, that run's own recipe (``whileai spread RUN``); else the built-in
      defaults. ``no_cache`` makes a judge ask again.
    - The grader: ``--grader`` if given, else the recipe's, else (with neither a recipe nor ``--grader``) the built-in
      rule; a judge's plan is said.
    - The rows: ``rows``, else the recipe's ``spread.rows`` (resolved against the recipe's folder).

    Raises:
        BadInput: a recipe without a grader section and no ``--grader`` (the built-in rule stands in only where no
            recipe was named, never for a recipe's missing grader), or no rows from either.
    """
    run_recipe = grader_recipe_of(rows) if run_grader and recipe is None and grader is None else None
    if run_recipe is not None:
        say(f"whileai: grading with the run's own grader and spread settings ({run_recipe}; --recipe or --grader "
            "chooses another)")  # fmt: skip
        recipe = run_recipe
    if no_cache:  # a judge asks again; --no-cache means nothing to any other grader
        loaded = default_recipe(overrides) if recipe is None else load_recipe(recipe, overrides)
        if loaded.recipe.grader is not None and loaded.recipe.grader.kind == "judge":
            overrides = [*overrides, "grader.judge.no_cache=true"]
    loaded = default_recipe(overrides) if recipe is None else load_recipe(recipe, overrides)
    grading = _command_line_grading(loaded, recipe, grader, say)
    settings = loaded.recipe.spread
    if rows is None and settings.rows is None:
        raise BadInput("give ROWS, or a recipe whose spread.rows names them")
    return GateSetup(grading, rows if rows is not None else loaded.resolve(str(settings.rows)), settings)


def _command_line_grading(loaded: LoadedRecipe, recipe: Path | None, grader: str | None, say: Say) -> GroupwiseGrading:
    if grader is not None:
        if loaded.recipe.grader is not None:
            say(f"whileai: --grader {grader} replaces the recipe's grader ({loaded.recipe.grader.kind})")
        return build_grading(loaded, grader_from_spec(grader, loaded.recipe.grading))
    if loaded.recipe.grader is not None:
        return build_grading(loaded, say=say)
    if recipe is not None:
        raise BadInput(
            f"{recipe}: this recipe has no grader section: add one (grader: kind: scripted | python | judge), "
            "or name one with --grader"
        )
    say(f"whileai: no grader given: using the built-in rule {DEFAULT_GRADER_RULE} (fewest tool calls first)")
    # The shipped rule itself, not a file of that name that happens to sit in the working directory.
    rule = Path(str(resources.files("whileai.configs"))) / DEFAULT_GRADER_RULE
    return build_grading(loaded, grader_from_spec(str(rule), loaded.recipe.grading))


def grader_recipe_of(rows: Path | None) -> Path | None:
    """The ``recipe.yaml`` of the training run whose folder (or its ``completions/``) ``rows`` names, when that run
    trained with a grader (a binary arm has none to grade with), else None: ``whileai spread RUN`` grades a run's
    completions with the grader and spread settings the run had."""
    if rows is None:
        return None
    for folder in (rows, rows.parent) if rows.name == "completions" else (rows,):
        candidate = folder / "recipe.yaml"
        if candidate.exists() and (folder / "completions").is_dir():
            written = read_yaml_file(candidate)  # one that does not read is named, never graded by another rule
            if not isinstance(written, dict):
                raise BadInput(f"{candidate}: the run's recipe is no mapping: give --recipe or --grader")
            return candidate if written.get("grader") else None
    return None


@dataclass(frozen=True)
class TaskSetup:
    """A recipe's task and verifier, what ``whileai.tasks`` takes (``whileai validate`` checks a verifier with it).

    Attributes:
        where: the recipe file, as messages name it.
        base_dir: the folder the recipe's relative paths are read from.
        data, verifier, trainer: the recipe's sections (the trainer's ``max_completion_length`` bounds a built-in
            verifier).
    """

    where: str
    base_dir: Path
    data: DataSection
    verifier: VerifierSection
    trainer: TrainerSection

    def resolve(self, relative: str) -> Path:
        """A path of the recipe's, made absolute against the recipe's folder (absolute paths stay)."""
        return resolve_path(self.base_dir, relative)

    def with_prompts(self, prompts: int | None) -> TaskSetup:
        """This setup with ``data.num_prompts`` set to ``prompts`` (``whileai eval`` draws the prompts past the
        trained ones from the wider task)."""
        return dataclasses.replace(self, data=self.data.model_copy(update={"num_prompts": prompts}))


@dataclass(frozen=True)
class TrainSetup(TaskSetup):
    """A training run as its recipe sets it up: what ``whileai.training`` takes, never the recipe itself.

    Attributes:
        output_dir: the run folder.
        written: the resolved recipe as the run folder keeps it (``recipe.yaml``); a resume compares it.
        shown: ``written`` as YAML, what the run folder and ``--dry-run`` show.
        model, spread, simulate: the recipe's sections.
        grader: the grader section, None for a binary arm (no grading).
        knobs: the grading section.
        gate_source: where the spread gate reads its rows (``Recipe.gate_source``).
    """

    output_dir: Path
    written: dict[str, Any]
    shown: str
    model: ModelSection
    spread: SpreadSection
    simulate: SimulateSection | None
    grader: GraderSection | None
    knobs: GradingSection
    gate_source: str | None

    def make_grading(self, say: Say | None = None) -> GroupwiseGrading | None:
        """A new ``GroupwiseGrading`` for the run (None for a binary arm), a judge's plan said through ``say``."""
        if self.grader is None:
            return None
        return _grading(self.grader, self.knobs, self.spread, self.base_dir, self.where, say=say)


def task_setup(loaded: LoadedRecipe) -> TaskSetup:
    """The task and verifier of a recipe that has both sections (its callers check)."""
    recipe = loaded.recipe
    assert recipe.data is not None and recipe.verifier is not None
    return TaskSetup(str(loaded.path), loaded.base_dir, recipe.data, recipe.verifier, recipe.trainer)


def train_setup(loaded: LoadedRecipe, *, checked: bool = True) -> TrainSetup:
    """The run a recipe asks for. ``checked``: as far as it can be without a model or the dataset, the sections
    training needs, what a run cannot do, the files and functions it names, what it needs of the machine.

    Raises:
        BadInput: naming the recipe, the field and the fix.
    """
    recipe = loaded.recipe
    recipe.require("model", "data", "verifier", command="train")
    if checked:
        check_references(loaded)
    task, model = task_setup(loaded), recipe.model
    assert model is not None
    return TrainSetup(
        **{field.name: getattr(task, field.name) for field in dataclasses.fields(task)},
        output_dir=Path(recipe.output_dir),
        written=loaded.written(),
        shown=loaded.dump(),
        model=model,
        spread=recipe.spread,
        simulate=recipe.simulate,
        grader=recipe.grader,
        knobs=recipe.grading,
        gate_source=recipe.gate_source(),
    )


def run_setup(run: Path) -> TrainSetup:
    """The setup a run folder trained with, from the recipe it keeps (``recipe.yaml``), for ``whileai eval``: not
    checked against this machine again (its loggers, the base model's folder: the run's own model is evaluated).

    Raises:
        BadInput: no such run folder, or its recipe no longer loads.
    """
    path = run / "recipe.yaml"
    if not path.is_file():
        raise BadInput(f"{run}: no recipe.yaml: not a run folder whileai train wrote")
    return train_setup(load_recipe(path), checked=False)
