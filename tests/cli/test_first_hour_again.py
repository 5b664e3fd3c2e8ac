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


# ---------------------------------------------------------------- a broken rows line, a closed pipe


def test_a_broken_rows_line_names_the_line_and_the_column_whole(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    good = '{"scenario_id": "t", "prompt": "p", "final_text": "ok", "reward": 1}\n'
    rows.write_text(good + '{"scenario_id": "t", "final_text": "a\tb"}\n')
    result = invoke("spread", rows)
    assert result.exit_code == 2
    assert f"{rows} line 2: not valid JSON (invalid control character at column 38)" in result.stderr


def _piped(command: str, lines: int, where: Path) -> tuple[int, str]:
    """``whileai COMMAND | head -LINES`` in a shell, in ``where``: whileai's exit status and its stderr."""
    import shlex
    import sys

    import child_processes

    whileai = f"{shlex.quote(sys.executable)} -m whileai.cli.main"
    script = f"{whileai} {command} 2>err.txt | head -{lines} >/dev/null; echo ${{PIPESTATUS[0]}}"
    done = child_processes.run(["bash", "-c", script], cwd=where, timeout=300)
    return int(done.stdout.strip().splitlines()[-1]), (where / "err.txt").read_text()


def test_a_closed_output_pipe_keeps_the_exit_status_of_what_was_done(tmp_path: Path) -> None:
    status, stderr = _piped(f"spread {ROWS} --verbose", 2, tmp_path)
    assert status == 0 and "Traceback" not in stderr and "Broken pipe" not in stderr, stderr
    status, stderr = _piped(f"train {REPO / 'recipes' / 'tiny_cpu_gar.yaml'} --dry-run", 1, tmp_path)
    assert status == 0 and "Error" not in stderr, stderr
    # Passes the built-in rule cannot tell apart (one tool call each): no spread is still exit 1.
    same = tmp_path / "same.jsonl"
    row = '{{"scenario_id": "t{g}", "prompt": "p", "final_text": "<tool_call>a</tool_call> done", "reward": {r}}}\n'
    same.write_text("".join(row.format(g=g, r=r) for g in range(8) for r in (1, 1, 0)))
    status, stderr = _piped(f"spread {same} --verbose", 1, tmp_path)
    assert status == 1 and "Traceback" not in stderr, stderr


# ---------------------------------------------------------------- a judge that is not there


def test_a_judge_at_a_closed_port_is_said_not_to_answer_in_the_plan_line() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"  # nothing listens there once the probe is closed
    recipe = REPO / "recipes" / "refund_judge.yaml"
    result = invoke("spread", ROWS, "--recipe", recipe, f"grader.judge.base_url={url}", "grader.judge.max_retries=0")
    assert result.exit_code == 4
    plan = next(line for line in result.stderr.splitlines() if line.startswith("whileai: judge "))
    assert f"1 call(s) at once (no answer from {url.removesuffix('/v1')}: is the server up?)" in plan, plan
    assert "does not say how many" not in plan


# ---------------------------------------------------------------- the help at 80 columns


def test_the_command_list_fits_80_columns_and_usage_lines_share_one_form() -> None:
    listed = invoke("--help", env={"COLUMNS": "80"})
    commands = listed.stdout.split("Commands:", 1)[1].strip().splitlines()
    assert len(commands) == 9 and all(len(line) <= 80 and not line.endswith("...") for line in commands), commands
    usages = {}
    for command in ("spread", "judge-eval", "simulate", "validate", "train", "report"):
        usages[command] = invoke(command, "--help", env={"COLUMNS": "120"}).stdout.splitlines()[0]
    assert usages["spread"] == "Usage: whileai spread [OPTIONS] [ROWS] [KEY=VALUE]..."
    assert usages["train"] == "Usage: whileai train [OPTIONS] RECIPE [KEY=VALUE]..."
    assert usages["report"] == "Usage: whileai report [OPTIONS] RUN..."
    assert not any("{" in line or "]]" in line or "]...]" in line for line in usages.values()), usages


def test_the_test_summary_names_each_skip() -> None:
    import tomllib

    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    chars = next(o[2:] for o in options.split() if o.startswith("-r"))
    assert "s" in chars and "f" in chars and "E" in chars  # skips named, failures and errors still listed


# ---------------------------------------------------------------- whileai env


def test_env_prints_what_a_bug_report_needs() -> None:
    import importlib.metadata
    import json
    import platform

    result = invoke("env", "--json")
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["packages"]["whileai-grpo"] == importlib.metadata.version("whileai-grpo")
    assert found["packages"]["trl"] == importlib.metadata.version("trl")
    assert found["packages"]["vllm"] is None or isinstance(found["packages"]["vllm"], str)
    assert found["python"] == platform.python_version() and found["accelerator"]
    lines = invoke("env").stdout.splitlines()
    assert f"- whileai-grpo: {found['packages']['whileai-grpo']}" in lines and "- accelerator: " in "\n".join(lines)


def test_every_command_puts_its_result_on_stdout(tmp_path: Path) -> None:
    valid = invoke("validate", BINARY)
    assert valid.exit_code == 0 and valid.stdout.startswith(f"whileai: {BINARY} is valid") and valid.stderr == ""
    printed = invoke("validate", BINARY, "--print")
    import yaml

    assert yaml.safe_load(printed.stdout)["trainer"] and "is valid" in printed.stderr  # stdout stays YAML
    rows = tmp_path / "rows.jsonl"
    simulated = invoke("simulate", "--scenarios", "builtin:refunds", "--n", "2", "-o", rows)
    assert simulated.stdout.startswith("pass@1 ") and "wrote" in simulated.stderr
    spread = invoke("spread", ROWS)
    assert spread.stdout.startswith("spread check: ") and "built-in rule" in spread.stderr
