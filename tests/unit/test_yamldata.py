"""YAML read as data: an alias bomb, an alias that contains itself, in a recipe, an include, an override, a judge's
prompt file and a rule file, each refused at once naming the file and line; aliases within the limit read as before."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from whileai.config import load_recipe
from whileai.errors import BadInput
from whileai.yamldata import read_yaml

LEVELS = "abcdefghij"


def bomb() -> str:
    """Nine lines whose last names 9**9 (387 million) values."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for previous, name in itertools.pairwise(LEVELS[:9]):
        lines.append(f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_bomb_under_a_trainer_field_is_refused_at_once_naming_its_line(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(bomb() + f"trainer:\n  model_init_kwargs: {{x: *{LEVELS[8]}}}\n")
    started = time.monotonic()
    with pytest.raises(
        BadInput, match=rf"^{recipe} line 6, column 4: it comes to more than 100000 values, aliases followed"
    ):
        load_recipe(recipe)
    assert time.monotonic() - started < 10  # a walk of 10 nodes, not of 387 million


def test_an_alias_that_contains_itself_is_refused() -> None:
    with pytest.raises(BadInput, match=r"^loop.yaml line 1, column \d+: an alias that contains itself"):
        read_yaml("a: &a [1, *a]\n", "loop.yaml")


def test_aliases_within_the_limit_read_as_before(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "grader: {kind: scripted, rule: &rule {measure: chars, order: ascending}}\n"
        "spread:\n  controls: 4\ntrainer: &trainer\n  beta: 0.001\n"
    )
    loaded = load_recipe(recipe)
    assert loaded.recipe.trainer.model_dump()["beta"] == 0.001
    assert read_yaml("base: &b {lr: 1}\nrun: {<<: *b, steps: 2}\n", "x") == {
        "base": {"lr": 1},
        "run": {"lr": 1, "steps": 2},
    }


def test_an_include_an_override_a_prompt_file_and_a_rule_file_are_read_the_same_way(tmp_path: Path) -> None:
    from whileai.config.build import grader_from_spec
    from whileai.config.schema import GradingSection
    from whileai.judge.prompts import load_prompts

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "block.yaml").write_text(bomb())
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("include: [block.yaml]\n")
    with pytest.raises(BadInput, match=r"block\.yaml line 6, column 4: it comes to more than"):
        load_recipe(recipe)
    flat = tmp_path / "flat.yaml"
    flat.write_text("grader: {kind: scripted}\n")
    one_line = "[" + ",".join(["&a [1,1,1,1,1,1,1,1,1,1]"] + ["*a"] * 20000) + "]"
    with pytest.raises(BadInput, match=r"^override trainer\.x line 1, column 1: it comes to more than"):
        load_recipe(flat, [f"trainer.x={one_line}"])
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(bomb())
    with pytest.raises(BadInput, match=rf"^judge prompts {prompts} line 6, column 4: it comes to more than"):
        load_prompts(str(prompts))
    rule = tmp_path / "rule.yaml"
    rule.write_text(bomb())
    with pytest.raises(BadInput, match=r"rule\.yaml line 6, column 4: it comes to more than"):
        grader_from_spec(str(rule), GradingSection())


def test_a_control_character_is_placed_by_line_and_column(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text('grader:\n  kind: scripted\nx: "\x01"\n')
    with pytest.raises(BadInput, match=rf"^{recipe} line 3, column 5: not valid YAML \(character '\\x01' is not"):
        load_recipe(recipe)


@pytest.mark.slow
def test_one_budget_holds_for_the_recipe_its_includes_and_its_overrides(tmp_path, monkeypatch) -> None:
    import time

    from typer.testing import CliRunner

    from whileai.cli.main import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    big = "[" + ", ".join(["1"] * 40_000) + "]"  # each part well within the limit on its own
    (tmp_path / "configs" / "block.yaml").write_text(f"spread:\n  seed: 0\ncomparison_arm: x\nnotes_unused: {big}\n")
    (tmp_path / "r.yaml").write_text("include: [block.yaml]\n")
    from whileai.errors import BadInput
    from whileai.yamldata import YamlBudget, read_yaml

    budget = YamlBudget(100_000)
    read_yaml(big, "override a", budget=budget)
    read_yaml(big, "override b", budget=budget)
    with pytest.raises(BadInput, match="override c: with what was read before it"):
        read_yaml(big, "override c", budget=budget)
    overrides = [f"spread.extra{i}={big}" for i in range(3)]
    runner = CliRunner()
    for command in (["validate"], ["train", "--dry-run"]):
        started = time.monotonic()
        result = runner.invoke(app, [*command, str(tmp_path / "r.yaml"), *overrides])
        assert result.exit_code == 2 and "override spread.extra1: with what was read before it" in result.stderr
        assert time.monotonic() - started < 30  # refused before anything is merged or dumped


def test_a_recipe_too_long_too_deep_or_including_twice_is_refused_at_once(tmp_path, monkeypatch) -> None:
    import time

    from whileai.config import load_recipe
    from whileai.errors import BadInput

    monkeypatch.chdir(tmp_path)
    flat = tmp_path / "flat.yaml"
    flat.write_text("spread:\n  seed: [" + ", ".join(["1"] * 400_000) + "]\n")
    started = time.monotonic()
    with pytest.raises(BadInput, match="characters of YAML, more than a recipe holds"):
        load_recipe(flat)
    assert time.monotonic() - started < 10  # PyYAML would compose it for seconds
    deep = tmp_path / "deep.yaml"
    deep.write_text("trainer:\n  model_init_kwargs: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(BadInput, match="nested more than 64 levels deep"):
        load_recipe(deep)
    with pytest.raises(BadInput, match="a key 500 levels deep"):
        load_recipe(
            Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu_gar.yaml", [".".join(["a"] * 500) + "=1"]
        )
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "outer.yaml").write_text("include: [inner.yaml]\n")
    (tmp_path / "configs" / "inner.yaml").write_text("spread: {seed: 3}\n")
    (tmp_path / "r.yaml").write_text("include: [outer.yaml]\n")
    with pytest.raises(BadInput, match="an included file includes no other"):
        load_recipe(tmp_path / "r.yaml")
