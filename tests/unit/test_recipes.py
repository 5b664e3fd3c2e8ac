"""Recipes: every shipped recipe validates, the precedence holds, and TRL's field names are current."""

from __future__ import annotations

from pathlib import Path

import pytest

from whileai.config import load_recipe, parse_overrides
from whileai.config.trl_fields import GRPO_CONFIG_FIELDS
from whileai.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_every_shipped_recipe_validates(recipe: Path) -> None:
    loaded = load_recipe(recipe)
    assert loaded.recipe is not None
    assert recipe.read_text().startswith("#"), "a recipe opens with a comment: what it runs, how long, on what"


def test_recipes_are_named_task_method() -> None:
    for recipe in RECIPES:
        assert recipe.stem.count("_") >= 1, recipe.name


def test_precedence_defaults_include_recipe_override(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "block.yaml").write_text("grading:\n  cap: 2.0\n  min_factor: 0.3\n  floor: 0.1\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("include: [block.yaml]\ngrading:\n  min_factor: 0.4\n  floor: 0.2\n")
    grading = load_recipe(recipe, ["grading.floor=0.25"]).recipe.grading
    assert grading.hack_zero is True  # built-in default
    assert grading.cap == 2.0  # from the include
    assert grading.min_factor == 0.4  # the recipe beats the include
    assert grading.floor == 0.25  # the override beats the recipe


def test_overrides_are_yaml_scalars() -> None:
    assert parse_overrides(["a.b=1e-5", "a.c=false", "d=text", "e=[1, 2]", "f="]) == {
        "a": {"b": 1e-5, "c": False},
        "d": "text",
        "e": [1, 2],
        "f": None,
    }
    with pytest.raises(BadInput, match="not key=value"):
        parse_overrides(["=3"])


def test_missing_include_is_named(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("include: [nope.yaml]\n")
    with pytest.raises(BadInput, match=r"include .nope\.yaml. was not found"):
        load_recipe(recipe)


def test_a_grader_only_recipe_is_valid_for_spread(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("grader:\n  kind: python\n  function: mygrader:rank\n")
    loaded = load_recipe(recipe)
    with pytest.raises(BadInput, match="needs the recipe section"):
        loaded.recipe.require("model", "data", "verifier", command="train")


def _trl_fields_whileai_uses() -> set[str]:
    """The GRPOConfig fields whileai itself uses: named in its code (a string, an attribute, a keyword argument or a
    declared field of ``core/`` and ``cli/``) or set in a shipped recipe's or config block's ``trainer`` section."""
    import ast

    import yaml

    from whileai.config.trl_fields import GRPO_CONFIG_FIELDS

    names: set[str] = set()
    for path in [*(REPO / "core").rglob("*.py"), *(REPO / "cli").rglob("*.py")]:
        if path.name == "trl_fields.py":  # the table itself names every field
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    for path in [*RECIPES, *(REPO / "configs").rglob("*.yaml")]:
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and isinstance(data.get("trainer"), dict):
            names |= set(data["trainer"])
    return names & GRPO_CONFIG_FIELDS


def test_known_trl_field_names_and_kinds_match_the_installed_trl() -> None:
    """A field whileai uses (``_trl_fields_whileai_uses``) that TRL dropped or retyped fails. Any other change is
    reported, not failed: a field TRL added (a routine release adds some; a recipe can use it once the table is
    regenerated), and one whileai's table lists but nothing of whileai uses that TRL dropped or retyped (a recipe
    that sets it fails at GRPOConfig(**trainer) with TRL's own message until the table is regenerated)."""
    pytest.importorskip("trl")
    import warnings

    from whileai.config.trl_fields import GRPO_CONFIG_KINDS, installed_kinds

    installed = installed_kinds()
    assert set(GRPO_CONFIG_KINDS) == GRPO_CONFIG_FIELDS
    used = _trl_fields_whileai_uses()
    # the scan finds what whileai's training path hands TRL; if it found nothing the test would prove nothing
    assert {"num_generations", "scale_rewards", "use_vllm", "vllm_mode", "max_completion_length", "bf16"} <= used
    gone = set(GRPO_CONFIG_KINDS) - set(installed)
    retyped = {k: (v, installed[k]) for k, v in GRPO_CONFIG_KINDS.items() if k in installed and installed[k] != v}
    broken = {k: retyped.get(k, "dropped") for k in sorted((gone | set(retyped)) & used)}
    assert not broken, f"TRL dropped or retyped fields whileai uses: {broken}; regenerate whileai.config.trl_fields"
    stale = sorted((gone | set(retyped)) - used)
    if stale:
        warnings.warn(f"TRL dropped or retyped GRPOConfig fields whileai does not use: {stale}", stacklevel=1)
    added = sorted(set(installed) - set(GRPO_CONFIG_KINDS))
    if added:
        warnings.warn(f"TRL's GRPOConfig has fields whileai does not know yet: {added}", stacklevel=1)


def test_the_trl_field_check_tells_used_fields_from_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above, against a TRL that dropped a used field, retyped another, dropped an unused one and added a
    new one: it fails on the first two only, and warns about the others."""
    pytest.importorskip("trl")
    from whileai.config import trl_fields

    used = _trl_fields_whileai_uses()
    unused = sorted(GRPO_CONFIG_FIELDS - used)
    assert unused, "every field is used: nothing left to warn about"
    fake = dict(trl_fields.GRPO_CONFIG_KINDS)
    monkeypatch.setattr(trl_fields, "installed_kinds", lambda: fake)
    del fake[unused[0]]
    fake["a_field_trl_added"] = "bool"
    with pytest.warns(UserWarning) as warned:
        test_known_trl_field_names_and_kinds_match_the_installed_trl()
    said = " ".join(str(w.message) for w in warned)
    assert unused[0] in said and "a_field_trl_added" in said
    del fake["num_generations"]
    fake["vllm_mode"] = "int"
    with pytest.raises(AssertionError, match=r"num_generations.*dropped.*vllm_mode"):
        test_known_trl_field_names_and_kinds_match_the_installed_trl()


def test_the_schema_knows_the_built_in_tasks_and_verifiers() -> None:
    from whileai.config.build import train_setup
    from whileai.config.load import load_recipe
    from whileai.config.schema import BUILTIN_DATASETS, BUILTIN_VERIFIERS
    from whileai.tasks.load import BUILTIN_VERIFIERS as verifiers
    from whileai.tasks.load import load_task

    assert tuple(verifiers) == BUILTIN_VERIFIERS
    for dataset in BUILTIN_DATASETS:  # every name the schema allows loads
        verifier = {"builtin:echo_digits": "echoes_digits"}.get(dataset, dataset.removeprefix("builtin:"))
        overrides = [f"data.dataset={dataset}", "data.num_prompts=2", f"verifier.builtin={verifier}"]
        recipe = load_recipe(REPO / "recipes" / "tiny_cpu_binary.yaml", overrides)
        assert load_task(train_setup(recipe)).rows


def test_a_built_in_verifier_is_refused_on_another_built_in_task() -> None:
    from whileai.config.load import default_recipe
    from whileai.config.schema import BUILTIN_TASK_OF_VERIFIER

    for verifier, task in BUILTIN_TASK_OF_VERIFIER.items():
        assert default_recipe([f"data.dataset={task}", f"verifier.builtin={verifier}"])  # its own task
    with pytest.raises(BadInput, match=r"verifier.builtin: word_problems reads the rows of .*builtin:echo_digits"):
        default_recipe(["data.dataset=builtin:echo_digits", "verifier.builtin=word_problems"])


def test_trainer_section_hands_over_to_grpo_config(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from trl import GRPOConfig

    recipe = tmp_path / "r.yaml"
    recipe.write_text("trainer:\n  num_generations: 4\n  max_steps: 3\n  beta: 0.0\n  loss_type: dr_grpo\n")
    section = load_recipe(recipe).recipe.trainer
    config = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, **section.grpo_kwargs())
    assert (config.num_generations, config.max_steps, config.scale_rewards, config.loss_type) == (
        4,
        3,
        "none",
        "dr_grpo",
    )


CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[str(p.relative_to(REPO)) for p in CONFIGS])
def test_every_shipped_config_parses_and_recipe_blocks_validate(config: Path) -> None:
    import yaml

    from whileai.config.load import validate_recipe

    data = yaml.safe_load(config.read_text())
    assert isinstance(data, dict)
    if config.parent.name in ("grader", "trainer"):
        validate_recipe(data, str(config))


def test_a_run_s_own_setup_is_not_checked_against_this_machine_again(tmp_path: Path) -> None:
    """``whileai eval`` evaluates the run's own model: a logger or a base-model folder this machine lacks does not
    refuse it, as they refuse a new run of the same recipe."""
    import yaml

    from whileai.config.build import run_setup, train_setup
    from whileai.config.load import load_recipe
    from whileai.errors import BadInput

    loaded = load_recipe(REPO / "recipes" / "my_task_gar.yaml", ["trainer.report_to=no_such_logger_here"])
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(loaded.written()))
    setup = run_setup(tmp_path)
    assert setup.trainer.model_dump()["report_to"] == "no_such_logger_here"
    with pytest.raises(BadInput, match="report_to"):
        train_setup(load_recipe(tmp_path / "recipe.yaml"))
    with pytest.raises(BadInput, match=r"no recipe\.yaml: not a run folder"):
        run_setup(tmp_path / "elsewhere")
