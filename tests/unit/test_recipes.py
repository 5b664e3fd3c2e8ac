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


def test_known_trl_field_names_and_kinds_match_the_installed_trl() -> None:
    """A field whileai knows that TRL dropped or retyped fails; one TRL added is reported, not failed (a routine TRL
    release adds fields; a recipe can use them once the table is regenerated)."""
    pytest.importorskip("trl")
    import warnings

    from whileai.config.trl_fields import GRPO_CONFIG_KINDS, installed_kinds

    installed = installed_kinds()
    assert set(GRPO_CONFIG_KINDS) == GRPO_CONFIG_FIELDS
    gone = sorted(set(GRPO_CONFIG_KINDS) - set(installed))
    retyped = {k: (v, installed[k]) for k, v in GRPO_CONFIG_KINDS.items() if k in installed and installed[k] != v}
    assert not gone and not retyped, f"TRL dropped {gone} and retyped {retyped}: regenerate whileai.config.trl_fields"
    added = sorted(set(installed) - set(GRPO_CONFIG_KINDS))
    if added:
        warnings.warn(f"TRL's GRPOConfig has fields whileai does not know yet: {added}", stacklevel=1)


def test_the_schema_knows_the_built_in_tasks_and_verifiers() -> None:
    from whileai.config.load import default_recipe
    from whileai.config.schema import BUILTIN_DATASETS, BUILTIN_VERIFIERS
    from whileai.training.tasks import BUILTIN_VERIFIERS as verifiers
    from whileai.training.tasks import load_task

    assert tuple(verifiers) == BUILTIN_VERIFIERS
    for dataset in BUILTIN_DATASETS:  # every name the schema allows loads
        assert load_task(default_recipe([f"data.dataset={dataset}", "data.num_prompts=2"])).rows


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
