"""The command line as a newcomer meets it: overrides on every command that reads a recipe, and `validate`
catching what `train` would reject, each with the YAML path and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "recipes" / "refund_rows.jsonl"
TINY = REPO / "recipes" / "tiny_cpu_gar.yaml"
runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


# ---------------------------------------------------------------- overrides everywhere


def test_spread_takes_overrides_in_any_order(judge_url_unreachable: str) -> None:
    recipe = REPO / "recipes" / "refund_judge.yaml"
    url = judge_url_unreachable
    result = invoke("spread", "--recipe", recipe, f"grader.judge.base_url={url}", "grader.judge.max_retries=0", ROWS)
    # the URL reached the judge whole (exit 4 names it), and ROWS was read as rows
    assert result.exit_code == 4 and url in result.stderr, result.stderr
    two = invoke("spread", ROWS, "--recipe", REPO / "recipes" / "refund_scripted.yaml", "spread.controls=0", "cap=2")
    assert two.exit_code == 2 and "cap: unknown key" in two.stderr  # an override is checked like the recipe
    plain = invoke("spread", ROWS, "--recipe", REPO / "recipes" / "refund_scripted.yaml", "spread.controls=0")
    assert plain.exit_code == 0 and "controls:" not in plain.stdout


def test_spread_overrides_apply_without_a_recipe_too(tmp_path: Path) -> None:
    result = invoke("spread", ROWS, "spread.min_std=0.5")
    assert result.exit_code == 1 and "below 0.5" in result.stdout
    assert invoke("spread", ROWS, ROWS).exit_code == 2


def test_simulate_takes_overrides_and_names_a_bad_option(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    recipe = REPO / "recipes" / "refund_agent_gar.yaml"
    result = invoke("simulate", "--recipe", recipe, "simulate.n=2", "simulate.num_scenarios=3", "--out", out)
    assert result.exit_code == 0 and len(out.read_text().splitlines()) == 6
    zero = invoke("simulate", "--n", "0", "--out", out)
    assert zero.exit_code == 2 and zero.stderr.strip() == (
        "whileai: error: --n: Input should be greater than or equal to 1 (got 0)"
    )
    assert "https://" not in zero.stderr  # no pydantic URL


def test_every_recipe_command_documents_overrides() -> None:
    for command in ("spread", "simulate", "validate", "train"):
        helped = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "KEY=VALUE" in helped.stdout or "key=value" in helped.stdout, command


def test_grader_beside_a_recipe_says_which_one_grades() -> None:
    result = invoke(
        "spread",
        ROWS,
        "--recipe",
        REPO / "recipes" / "refund_scripted.yaml",
        "--grader",
        REPO / "configs" / "grader" / "tool_calls.yaml",
    )
    # The shipped rule tells the shipped rows' passes apart: a spread, so exit 0.
    assert result.exit_code == 0, result.output
    assert "replaces the recipe's grader (scripted)" in result.stderr


# ---------------------------------------------------------------- validate catches what train would


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.max_steps=ten", "trainer: max_steps: an integer is needed, got 'ten'"),
        ("trainer.max_steps=1.5", "trainer: max_steps: an integer is needed, got 1.5"),
        ("trainer.bf16=maybe", "trainer: bf16: true or false or null is needed, got 'maybe'"),
        ("trainer.reward_weights=[a]", "reward_weights"),
        ("model.tiny.hidden_size=abc", "model.tiny.hidden_size: Input should be a valid integer"),
        ("model.tiny.hidden_size=66", "hidden_size 66 is not divisible by num_attention_heads 4"),
        ("model.tiny.widht=64", "model.tiny.widht: unknown key"),
        ("data.dataset=builtin:nope", "unknown built-in task 'builtin:nope' (allowed: builtin:echo_digits"),
        ("verifier.builtin=nope", "unknown built-in verifier 'nope' (allowed: echoes_digits, support, word_problems)"),
        ("trainer.per_device_train_batch_size=12", "must be divisible by num_generations 8"),
        ("trainer.per_device_train_batch_size=4 trainer.steps_per_generation=3", "= 12, must be divisible"),
        ("trainer.generation_batch_size=40", "generation_batch_size 40 must be divisible by the global batch size 32"),
        ("trainer.eval_strategy=steps trainer.num_generations_eval=3", "divisible by num_generations_eval 3"),
    ],
)
def test_validate_and_dry_run_refuse_what_train_would(override, message) -> None:
    for command in (["validate"], ["train", "--dry-run"]):
        result = invoke(*command[:1], TINY, *override.split(), *command[1:])
        assert result.exit_code == 2, (command, result.stdout)
        assert message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "TypeError" not in result.stderr


def test_a_number_written_like_1e_5_is_a_number() -> None:
    # YAML 1.1 reads 1e-5 as text; TRL would get a string. The schema reads it as the float it is.
    from whileai.config import load_recipe

    loaded = load_recipe(TINY, ["trainer.weight_decay=1e-5"])
    assert loaded.recipe.trainer.model_dump()["weight_decay"] == 1e-05


def test_validate_resolves_the_functions_a_recipe_names(tmp_path: Path) -> None:
    (tmp_path / "grader.py").write_text("def rank(group):\n    return {'ranking': []}\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("grader: {kind: python, function: 'grader.py:rnak'}\n")
    result = invoke("validate", recipe)
    assert result.exit_code == 2 and "grader.function 'grader.py:rnak'" in result.stderr
    assert "has no attribute 'rnak'; did you mean 'rank'?" in result.stderr
    recipe.write_text("grader: {kind: python, function: 'grader.py:rank'}\n")
    assert invoke("validate", recipe).exit_code == 0


@pytest.fixture
def judge_url_unreachable() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1?team=a&x=1"


def test_json_output_takes_the_overrides_after_it() -> None:
    assert json.loads(invoke("spread", ROWS, "--json").stdout)["controls"]["sent"] == 2
    data = json.loads(invoke("spread", ROWS, "--json", "spread.controls=1").stdout)
    assert data["controls"]["sent"] == 1 and data["controls"]["agreement_groups"] == 1


# ---------------------------------------------------------------- quiet input handling, plain TRL logs


def test_a_folder_says_which_files_it_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "rows"
    folder.mkdir()
    (folder / "page.jsonl").write_text(ROWS.read_text())
    (folder / "notes.txt").write_text("not rows")
    (folder / "config.json").write_text('{"model": "x"}')
    result = invoke("spread", folder, "spread.controls=0")
    assert result.exit_code == 0
    assert "read 1 rows file(s)" in result.stderr and "left out 2" in result.stderr
    assert "config.json (a .json file that holds no rows)" in result.stderr
    assert "notes.txt (not .jsonl, .json or .parquet)" in result.stderr


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_an_empty_rows_file_is_bad_input(tmp_path: Path, content: str) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content)
    result = invoke("spread", empty)
    assert result.exit_code == 2 and "nothing to grade: it holds no rows" in result.stderr


def plain_trl_log(path: Path, step: int) -> None:
    """A completion log as TRL writes it for a run that did not use whileai: a reward column per function."""
    pd = pytest.importorskip("pandas")
    prompts = ["p1"] * 4 + ["p2"] * 4
    completions = ["done", "done done", "no", "x", "done", "a done", "b", "c"]
    pd.DataFrame(
        {
            "step": [step] * 8,
            "prompt": prompts,
            "completion": completions,
            "accuracy_reward": [1.0 if "done" in c else 0.0 for c in completions],
            "format_reward": [0.5] * 8,
            "advantage": [0.0] * 8,
        }
    ).to_parquet(path)


def test_a_plain_trl_log_names_its_reward_columns(tmp_path: Path) -> None:
    logs = tmp_path / "completions"
    logs.mkdir()
    plain_trl_log(logs / "completions_00001.parquet", 1)
    result = invoke("spread", logs)
    assert result.exit_code == 2
    assert "its reward columns: 'accuracy_reward', 'format_reward'" in result.stderr and "--reward-key" in result.stderr
    named = invoke("spread", logs, "--reward-key", "accuracy_reward", "--json")
    assert named.exit_code in (0, 1) and json.loads(named.stdout)["rows"]["read"] == 8


def test_a_generation_logged_twice_is_graded_once(tmp_path: Path) -> None:
    # steps_per_generation=2: TRL writes one generation into two consecutive log files
    logs = tmp_path / "completions"
    logs.mkdir()
    plain_trl_log(logs / "completions_00001.parquet", 1)
    plain_trl_log(logs / "completions_00002.parquet", 2)
    result = invoke("spread", logs, "--reward-key", "accuracy_reward", "--json")
    data = json.loads(result.stdout)
    assert data["rows"]["duplicate_groups"] == 2 and data["groups"] + data["skipped_groups"] == 2
    assert "dropped 2 group(s) read twice" in result.stderr


def test_the_plan_says_how_many_cpu_threads_a_tiny_model_trains_on() -> None:
    def threads(*overrides: str) -> str:
        plan = runner.invoke(app, ["train", str(TINY), *overrides, "--dry-run"], env={"COLUMNS": "200"}).stdout
        line = next(line for line in plan.splitlines() if "CPU threads" in line)
        return line.split("│")[-1].strip()

    assert threads() == "1"  # a tiny model: one thread, whatever else runs on the machine
    assert threads("model.threads=2") == "2"
    assert invoke("validate", TINY, "model.threads=0").exit_code == 2


def test_train_on_logged_rows_says_how_it_read_them_and_a_refusal_comes_before_generation(
    tmp_path: Path, judge_url_unreachable: str
) -> None:
    import shutil

    shutil.copytree(REPO / "recipes" / "my_task", tmp_path / "my_task")
    recipe = tmp_path / "r.yaml"
    recipe.write_text((REPO / "recipes" / "my_task_gar.yaml").read_text())
    rows = [json.loads(line) for line in ROWS.open()]
    logged = [{"prompt": f"ask {r['scenario_id']}", "completion": r["final_text"], "reward": r["reward"]} for r in rows]
    (tmp_path / "logged.jsonl").write_text("".join(json.dumps(row) + "\n" for row in logged))
    gate = ["spread.rows=logged.jsonl", "spread.sample=null", f"output_dir={tmp_path / 'run'}"]
    result = invoke("train", recipe, *gate)
    assert result.exit_code == 1 and "logged.jsonl: read as logged rows: each 'prompt' a group" in result.stderr
    assert "spread.group_key" in result.stderr and "generating with" not in result.stderr + result.stdout
    import yaml

    judged = yaml.safe_load(recipe.read_text())
    judged["grader"] = {"kind": "judge", "judge": {"model": "m", "max_retries": 0, "base_url": judge_url_unreachable}}
    recipe.write_text(yaml.safe_dump(judged))
    dead = invoke("train", recipe, *gate[:2], f"output_dir={tmp_path / 'run2'}")
    assert dead.exit_code == 4 and "generating with" not in dead.stderr + dead.stdout, dead.stderr


def test_spread_s_human_output_counts_the_hacks() -> None:
    found = invoke("spread", ROWS, "--recipe", REPO / "recipes" / "refund_scripted.yaml")
    assert found.exit_code == 0 and "hacks confirmed: 1 in 1 group(s) (refund-22), zeroed" in found.stderr


@pytest.mark.slow
def test_a_gate_on_an_initial_model_that_never_passes_names_spread_rows(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(REPO / "recipes" / "my_task", tmp_path / "my_task")
    recipe = tmp_path / "r.yaml"
    recipe.write_text((REPO / "recipes" / "my_task_gar.yaml").read_text())
    never = ["verifier.function=null", "verifier.builtin=word_problems", f"output_dir={tmp_path / 'run'}"]
    result = invoke("train", recipe, *never)  # the tiny model never writes a boxed answer
    said = " ".join(result.stderr.split())
    assert result.exit_code == 1 and "spread: too few scores to judge" in said, said
    assert "gate it on rows of your own instead (spread.rows:" in said and "--skip-spread-gate" in said
