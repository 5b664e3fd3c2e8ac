"""What a newcomer meets in the first hour: exit codes that --debug leaves alone, Ctrl-C as 130 with a word, a run
folder graded with its own grader, and the small messages (the override blamed, a misspelt grader kind, every
section validate read, what the dry run shows, the extra a missing torch needs).

Elsewhere: the calculator's bad input (test_cli.py), report windows (test_report.py), a real SIGINT to ``spread``
(tests/integration/test_judge_cli.py), a resume's gate verdict and tied weights (test_trl_training.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import child_processes
import pytest
import yaml
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "recipes" / "refund_rows.jsonl"
TINY = REPO / "recipes" / "tiny_cpu_gar.yaml"
runner = CliRunner()


def invoke(*args: object, **keywords):
    return runner.invoke(app, [str(a) for a in args], **keywords)


def closed_url() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# ---------------------------------------------------------------- --debug adds a traceback and nothing else


def test_debug_keeps_the_exit_code_of_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("grader:\n  kind: scripted\n  nonsense: 1\n")
    plain, debug = invoke("validate", bad), invoke("--debug", "validate", bad)
    assert plain.exit_code == debug.exit_code == 2
    assert "grader.nonsense: unknown key" in plain.stderr and "Traceback" not in plain.stderr
    assert "Traceback" in debug.stderr and debug.stderr.rstrip().endswith(plain.stderr.strip().splitlines()[-1])


def test_debug_keeps_the_exit_code_of_an_unreachable_judge() -> None:
    recipe, url = REPO / "recipes" / "refund_judge.yaml", closed_url()
    args = ["spread", ROWS, "--recipe", recipe, f"grader.judge.base_url={url}", "grader.judge.max_retries=0"]
    plain, debug = invoke(*args), invoke("--debug", *args)
    assert plain.exit_code == debug.exit_code == 4, (plain.stderr, debug.stderr)
    assert "traceback" in debug.stderr.lower() and "traceback" not in plain.stderr.lower()


# ---------------------------------------------------------------- Ctrl-C: 130, said, and in every --help


@pytest.mark.parametrize("command", ["spread", "simulate"])
def test_ctrl_c_inside_a_command_exits_130_with_a_word(command: str, tmp_path: Path, monkeypatch) -> None:
    def interrupted(*_, **__):
        raise KeyboardInterrupt

    if command == "spread":
        monkeypatch.setattr("whileai.grading.gate.check_spread_file", interrupted)
        result = invoke("spread", ROWS)
    else:
        monkeypatch.setattr("whileai.simulations.rollouts.simulate", interrupted)
        result = invoke("simulate", "--n", "2", "-o", tmp_path / "rows.jsonl")
    assert result.exit_code == 130 and result.stderr.strip().splitlines()[-1] == "whileai: interrupted (Ctrl-C)"


@pytest.mark.parametrize("command", ["spread", "simulate", "redistribute", "report", "validate", "train"])
def test_every_help_names_exit_code_130(command: str) -> None:
    shown = invoke(command, "--help")
    assert shown.exit_code == 0 and "130 interrupted" in " ".join(shown.stdout.split()), shown.stdout


# ---------------------------------------------------------------- a run folder knows its grader


def _run_folder(root: Path) -> Path:
    """A run folder as ``whileai train`` leaves it for ``spread``: recipe.yaml (the chars rule) and completions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from whileai.config import load_recipe

    run = root / "run"
    (run / "completions").mkdir(parents=True)
    (run / "recipe.yaml").write_text(load_recipe(TINY).dump())
    rows = []
    for group in range(4):
        for member in range(8):
            passed = member % 2 == 0
            text = f"{group} " + "and more " * member if passed else "no"
            rows.append(
                {
                    "step": 1,
                    "prompt": f"task {group}",
                    "completion": text,
                    "whileai_group": f"1.0:{group}",
                    "whileai_reward": 1.0 if passed else 0.0,
                    "advantage": 0.5 if passed else -0.5,
                }
            )
    pq.write_table(pa.Table.from_pylist(rows), run / "completions" / "completions_00001.parquet")
    return run


@pytest.mark.parametrize("where", ["run", "run/completions"])
def test_spread_on_a_run_folder_grades_with_the_runs_grader(tmp_path: Path, where: str) -> None:
    pytest.importorskip("pyarrow")
    run = _run_folder(tmp_path)
    result = invoke("spread", tmp_path / where, "spread.controls=0")
    assert result.exit_code == 0, result.stderr
    assert f"grading with the run's own grader and spread settings ({run / 'recipe.yaml'}" in result.stderr
    assert "spread: yes" in result.stdout
    # --grader says otherwise: the built-in tool-call rule finds no spread in completions without tool calls
    rule = REPO / "configs" / "grader" / "tool_calls.yaml"
    other = invoke("spread", tmp_path / where, "--grader", rule)
    assert other.exit_code == 1 and "own grader" not in other.stderr and "spread: no" in other.stdout


# ---------------------------------------------------------------- the smaller messages


def test_an_overrides_typo_is_blamed_on_the_override() -> None:
    result = invoke("validate", TINY, "trainer.learnin_rate=1")
    assert result.exit_code == 2
    assert result.stderr.startswith("whileai: error: override 'trainer.learnin_rate=1': ")
    assert "did you mean 'learning_rate'?" in result.stderr and str(TINY) not in result.stderr


def test_a_misspelt_grader_kind_gets_a_did_you_mean(tmp_path: Path) -> None:
    recipe = tmp_path / "kind.yaml"
    recipe.write_text("grader:\n  kind: scriptd\n")
    result = invoke("validate", recipe)
    assert result.exit_code == 2
    assert "grader.kind: unknown kind 'scriptd'; did you mean 'scripted'? (allowed: scripted, python, judge)" in (
        result.stderr
    )


def test_validate_lists_every_section_the_recipe_sets() -> None:
    result = invoke("validate", TINY)
    listed = result.stdout.split("(sections: ")[1].rstrip().rstrip(")").split(", ")
    written = list(yaml.safe_load(TINY.read_text()))
    assert result.exit_code == 0 and sorted(listed) == sorted(written)


def test_the_dry_run_shows_what_the_recipe_means() -> None:
    shown = invoke("train", TINY, "--dry-run", env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.stderr
    rule = shown.stdout.split("rule:", 1)[1].split("grading:", 1)[0]
    assert "measure: chars" in rule and "pattern: <tool_call>" not in rule  # chars reads no pattern
    assert "logging_steps: 1\n" in shown.stdout and "logging_steps: 1.0" not in shown.stdout


def test_without_torch_the_advantages_name_the_train_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
        "sys.meta_path.insert(0, _NoTorch())\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = child_processes.run([sys.executable, "-c", "import whileai.advantages"], env=env, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "pip install 'whileai-grpo[train]'" in last and "torch" in last, done.stderr


def test_a_binary_runs_folder_is_graded_by_the_built_in_rule(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from whileai.config import load_recipe

    run = _run_folder(tmp_path)
    (run / "recipe.yaml").write_text(load_recipe(TINY, ["grader=null"]).dump())
    result = invoke("spread", run)
    assert "own grader" not in result.stderr and "using the built-in rule" in result.stderr, result.stderr


@pytest.mark.parametrize("recipe", sorted(p.name for p in (REPO / "recipes").glob("*.yaml")))
def test_the_recipe_a_run_writes_loads_again(recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``whileai train`` writes the resolved recipe into the run folder; ``validate`` (and ``spread RUN``) read it
    there, from another working folder: the files it names (rows, a grader's or verifier's ``.py``) are absolute."""
    from whileai.config import load_recipe

    loaded = load_recipe(REPO / "recipes" / recipe)
    model = loaded.recipe.model
    if model is not None and model.name_or_path is not None:
        folder = tmp_path / model.name_or_path  # the local model folder a real-model recipe names
        folder.mkdir(parents=True)
        for name in ("config.json", "tokenizer.json"):
            (folder / name).write_text("{}")
    monkeypatch.chdir(tmp_path)
    written = tmp_path / "run" / "recipe.yaml"
    written.parent.mkdir()
    written.write_text(loaded.dump())
    result = invoke("validate", written)
    assert result.exit_code == 0, result.stderr
