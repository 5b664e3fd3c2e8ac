"""What a new user still trips on in the first hour, each through the command line: a recipe without a grader named
to spread or judge-eval, a misspelt key in a recipe file, a negative step count, a broken rows line, a closed
output pipe, a judge that is not there, results on stdout, the model card, the package's metadata.

The first pass is ``test_first_hour.py``."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "recipes" / "refund_rows.jsonl"
BINARY = REPO / "recipes" / "tiny_cpu_binary.yaml"
runner = CliRunner()


def invoke(*args: object, **keywords):
    return runner.invoke(app, [str(a) for a in args], **keywords)


# ---------------------------------------------------------------- a recipe without a grader


def test_a_recipe_without_a_grader_is_refused_by_spread_and_judge_eval(tmp_path: Path) -> None:
    for command in ("spread", "judge-eval"):
        result = invoke(command, ROWS, "--recipe", BINARY)
        assert result.exit_code == 2, (command, result.stderr)
        assert f"{BINARY}: this recipe has no grader section" in result.stderr, result.stderr
        assert "built-in rule" not in result.stderr and result.stdout == ""


def test_without_a_recipe_the_built_in_rule_still_stands_in() -> None:
    result = invoke("spread", ROWS)
    assert result.exit_code == 0 and "using the built-in rule" in result.stderr


# ---------------------------------------------------------------- a misspelt key, a negative step count


def test_a_misspelt_kind_in_a_recipe_file_gets_the_did_you_mean_an_override_gets(tmp_path: Path) -> None:
    recipe = tmp_path / "kindd.yaml"
    recipe.write_text("grader:\n  kindd: scripted\n")
    result = invoke("validate", recipe)
    assert result.exit_code == 2
    assert "grader: 'kind' is required (scripted, python or judge); 'kindd': unknown key; did you mean 'kind'?" in (
        result.stderr
    )
    assert "Unable to extract tag" not in result.stderr


def test_a_key_one_section_too_high_names_the_section() -> None:
    result = invoke("validate", BINARY, "max_steps=5")
    assert result.exit_code == 2 and "did you mean 'trainer.max_steps'?" in result.stderr, result.stderr


def test_a_negative_max_steps_is_refused_and_minus_one_means_epochs() -> None:
    refused = invoke("validate", BINARY, "trainer.max_steps=-5")
    assert refused.exit_code == 2
    assert "override 'trainer.max_steps=-5': trainer: 'max_steps' must be at least 1, or -1 to train for" in (
        refused.stderr
    )
    assert invoke("validate", BINARY, "trainer.max_steps=-1").exit_code == 0
    zero = invoke("validate", BINARY, "trainer.logging_steps=0")
    assert zero.exit_code == 2 and "'logging_steps' must be above 0 (got 0)" in zero.stderr
