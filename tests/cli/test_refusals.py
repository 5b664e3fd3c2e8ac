"""Every refusal names its cause, before any work is done: numbers and nesting Python will not hold, URLs a request
could not go to or a reader would misread, values TRL would take and fail on, a checkpoint outside the run, a disk
that refuses a write; and zero-width characters are shown, not hidden."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.progress import visible

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "tiny_cpu_gar.yaml"
JUDGE = REPO / "recipes" / "refund_judge.yaml"
runner = CliRunner()


def refused(*args: object) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "--debug" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("trainer.seed=" + "9" * 5000, "trainer.seed:"),
        ("trainer.learning_rate=.inf", "trainer.learning_rate: Input should be a finite number"),
        ("trainer.seed=12345678901234567890123456", "trainer.seed: Input should be less than or equal to 4294967295"),
        (
            "trainer.max_grad_norm=.nan",
            "override 'trainer.max_grad_norm=.nan': trainer: max_grad_norm: a finite number",
        ),
    ],
)
def test_values_trl_would_fail_on_are_refused_by_validate(override: str, said: str) -> None:
    assert said in refused("validate", TINY, override)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://[::1/v1", "base_url cannot be read as a URL (Invalid IPv6 URL)"),
        ("http://127.0.0.1:\u0668\u0660/v1", "base_url's port is not a number from 1 to 65535"),
        ("http://127.0.0.1:8000/v1\u200b", "an invisible or bidi character (U+200B) at position 24"),
        ("http://exa\u202emple.com/v1", "an invisible or bidi character (U+202E) at position 10"),
    ],
)
def test_a_url_no_request_could_go_to_or_a_reader_would_misread_is_refused(url: str, said: str) -> None:
    assert said in refused("validate", JUDGE, f"grader.judge.base_url={url}")


def test_rows_python_will_not_hold_are_named_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHILEAI_JSON", "json")
    big = tmp_path / "big.jsonl"
    big.write_text('{"scenario_id": "a", "reward": ' + "9" * 5000 + ', "final_text": "x"}\n')
    assert f"{big} line 1: not valid JSON (Exceeds the limit (4300 digits)" in refused("spread", big)
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"scenario_id": "a", "reward": 1, "final_text": ' + "[" * 5000 + "]" * 5000 + "}\n")
    assert f"{deep} line 1: not valid JSON (nested too deeply to read)" in refused("spread", deep)


def test_a_checkpoint_outside_the_run_is_refused_before_any_evaluation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "recipe.yaml").write_text(TINY.read_text())
    said = refused("eval", run, "--checkpoint", "../other")
    assert "--checkpoint '../other': name one of the run's checkpoint-N folders (checkpoint-2)" in said


def test_a_disk_that_refuses_a_write_is_named_with_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    import whileai.config

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/whileai_run.json")

    monkeypatch.setattr(whileai.config, "load_recipe", full)
    assert "whileai: error: /runs/x/whileai_run.json: No space left on device" in refused("validate", TINY)


def test_zero_width_characters_are_shown_escaped() -> None:
    assert visible("ORD-\u200b42\ufeff") == "ORD-\\u200b42\\ufeff"


def test_fewer_rows_than_the_prompts_asked_for_is_said_not_cut_silently(tmp_path: Path) -> None:
    import json
    import shutil

    import yaml

    shutil.copytree(REPO / "recipes" / "my_task", tmp_path / "my_task")  # the recipe's grader and verifier
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(24)))
    recipe = yaml.safe_load((REPO / "recipes" / "my_task_gar.yaml").read_text())
    recipe["data"] = {"dataset": "rows.jsonl", "num_prompts": 20, "eval_prompts": 10}
    recipe["trainer"]["eval_strategy"] = "steps"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    said = refused("validate", path)
    assert "data.num_prompts 20 with data.eval_prompts 10 needs 30 rows, and data.dataset rows.jsonl has 24" in said
    assert "ask for at most 14 prompts, or hold out fewer" in said


@pytest.mark.parametrize(
    "override",
    [
        'grader.judge.base_url="http://user:PW0rdSecret7@[bad/v1"',
        "grader.judge.base_url='http://user:PW0rdSecret7@host:99999/v1'",
        'grader={kind: judge, judge: {base_url: "http://user:PW0rdSecret7@[bad/v1", model: m}}',
        "grader={kind: judge, judge: {base_url: http://user:PW0rdSecret7@[bad/v1, model: m}}",
        'grader.judge.base_url="http://h:99999/v1?api_key=PW0rdSecret7"',
    ],
)
@pytest.mark.parametrize("command", [["validate", JUDGE], ["spread", "--recipe", JUDGE], ["train", "--dry-run", JUDGE]])
def test_a_url_password_is_masked_however_the_override_quotes_it(command: list[object], override: str) -> None:
    said = refused(*command, override)
    assert "PW0rdSecret7" not in said and "[secret hidden]" in said, said


def test_a_column_the_trainer_s_dataset_cannot_hold_is_refused_before_the_gate(tmp_path: Path) -> None:
    import json
    import shutil

    shutil.copytree(REPO / "recipes" / "my_task", tmp_path / "my_task")
    rows = [json.loads(line) for line in (tmp_path / "my_task" / "problems.jsonl").read_text().splitlines()]
    for number, row in enumerate(rows):
        row["tests"] = 3 if number == 4 else [1, 2]  # natural for test cases, and no Arrow column holds both
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        (REPO / "recipes" / "my_task_gar.yaml").read_text().replace("my_task/problems.jsonl", "mixed.jsonl")
    )
    said = "data.dataset mixed.jsonl: column 'tests' holds a list of numbers in row 1 and a number in row 5"
    for command in (
        ["validate", recipe, "verifier.function=null", "verifier.builtin=word_problems"],
        ["validate", recipe],
    ):
        assert said in refused(*command) and "as a JSON string" in refused(*command)
    assert said in refused("train", recipe, f"output_dir={tmp_path / 'run'}")
    assert not (tmp_path / "run").exists()  # before the gate: no folder, no grader or judge call


@pytest.mark.parametrize(
    "values",
    [
        [[1, 2], 3], ["a", 3], [1, 2.5], [True, 1], [{"a": 1}, "x"], [{"a": 1}, {"b": "x"}], [{"a": 1}, {"a": "x"}],
        [[1], ["a"]], [[1], None], [[], ["a"]], [[[1]], [1]], [[1, "a"]], [[{"k": [1]}], [{"k": []}, None]],
    ],
)  # fmt: skip
def test_the_column_check_agrees_with_the_trainer_s_dataset(values: list[object]) -> None:
    datasets = pytest.importorskip("datasets")
    from whileai.errors import BadInput
    from whileai.tasks.load import check_columns

    rows = [{"prompt": "p", "c": value} for value in values]
    try:
        datasets.Dataset.from_list(rows)
        held = True
    except (ValueError, TypeError):  # pyarrow's ArrowInvalid and ArrowTypeError
        held = False
    try:
        check_columns(rows, "data.dataset d")
        passed = True
    except BadInput:
        passed = False
    assert passed == held


def test_eval_fits_its_prompts_to_the_rows_left_and_names_only_what_the_user_can_set(tmp_path: Path) -> None:
    import shutil

    from whileai.config import load_recipe

    shutil.copytree(REPO / "recipes" / "my_task", tmp_path / "my_task")  # 24 rows
    (tmp_path / "r.yaml").write_text((REPO / "recipes" / "my_task_gar.yaml").read_text())
    for trained in (16, 24):
        (tmp_path / f"run{trained}").mkdir()
        kept = load_recipe(tmp_path / "r.yaml", [f"data.num_prompts={trained}"]).dump()
        (tmp_path / f"run{trained}" / "recipe.yaml").write_text(kept)
    result = runner.invoke(app, ["eval", str(tmp_path / "run16")])  # no model saved: refused once the rows are known
    said = " ".join(result.stderr.split())
    assert "eval on the 8 row(s) of data.dataset" in said and "past the 16 the run trained on" in said, said
    assert result.exit_code == 2 and "no saved model" in said and "num_prompts" not in said
    assert "ask for at most 8" in refused("eval", tmp_path / "run16", "--prompts", 20)
    assert "--prompts 0: ask for 1 or more" in refused("eval", tmp_path / "run16", "--prompts", 0)
    said = refused("eval", tmp_path / "run24")
    assert "the run trained on all its 24 rows, and none is left" in said and "data.eval_prompts=N" in said
    assert "num_prompts" not in said


def test_an_alias_that_contains_itself_is_refused_in_an_override_as_in_a_recipe(tmp_path: Path) -> None:
    assert "override spread.controls line 1, column 1: an alias that contains itself" in refused(
        "validate", JUDGE, "spread.controls=&a [*a]"
    )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(JUDGE.read_text() + "comparison_arm: &a [*a]\n")
    assert "an alias that contains itself" in refused("validate", recipe)


def test_a_misspelt_model_init_kwargs_key_is_refused_by_validate() -> None:
    said = refused("validate", TINY, "trainer.model_init_kwargs={attn_implementaton: eager}")
    assert "trainer: model_init_kwargs: unknown key 'attn_implementaton'; did you mean 'attn_implementation'?" in said
    kept = runner.invoke(app, ["validate", str(TINY), "trainer.model_init_kwargs={rope_theta: 3, use_cache: false}"])
    assert kept.exit_code == 0, kept.stderr  # a key of the model's config passes


def test_a_key_typed_into_a_field_of_its_own_is_never_echoed() -> None:
    recipe = str(REPO / "recipes" / "refund_judge.yaml")
    result = CliRunner().invoke(app, ["validate", recipe, "grader.judge.api_key=S3CRETPW123"])
    assert result.exit_code == 2 and "S3CRETPW" not in result.stderr + result.stdout
    assert "override 'grader.judge.api_key=[secret hidden]'" in result.stderr and "api_key_env" in result.stderr
