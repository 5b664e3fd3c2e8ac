"""docs/own-task.md (the README's "Your own task"), run as a user with the shipped template runs it: the page's
commands exactly as it shows them (in this process: the walkthrough runs the console script), in a folder holding
only a copy of ``recipes/``, each printing what the page shows; then what the
section promises of each piece (TRL's advantages on equation 3 with partial credit and a hack, chat prompts, the
environment's tools, Parquet rows, a datasets name without a hub, a verifier TRL could not call)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

pytest.importorskip("trl")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "own-task.md").read_text()  # the README's pointer leads here


def _section() -> str:
    found = re.search(r"^# Your own task\n(.*?)(?=^## |\Z)", PAGE, re.S | re.M)
    assert found is not None
    return found.group(1)


def _steps() -> list[tuple[list[list[str]], str]]:
    """Each ```bash block of the section with the ```text block after it."""
    blocks = re.findall(r"```bash\n(.*?)```\n\n```text\n(.*?)```", _section(), re.S)
    return [([shlex.split(line) for line in body.splitlines() if line.strip()], shown) for body, shown in blocks]


def _run(words: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """One ``whileai`` command, in this process (the console script is the walkthrough's to run), from ``cwd``."""
    from typer.testing import CliRunner

    from whileai.cli.main import app

    assert words[0] == "whileai", words
    monkeypatch.chdir(cwd)
    done = CliRunner().invoke(app, words[1:], env={"COLUMNS": "120", "HF_HUB_OFFLINE": "1"})
    assert done.exit_code == 0, (" ".join(words), done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout, done.stderr


def _assert_shows(shown: str, printed: str) -> None:
    """The page's lines in order, ``...`` standing for lines left out."""
    lines = [line.rstrip() for line in printed.splitlines()]
    position = 0
    for line in shown.splitlines():
        if line == "...":
            continue
        found = next((i for i in range(position, len(lines)) if lines[i] == line.rstrip()), None)
        assert found is not None, f"the page shows {line!r}; printed:\n{printed}"
        position = found + 1


@pytest.fixture(scope="module")
def own_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The section's commands, run once in a folder that holds a copy of ``recipes/`` (the runs go to ``runs/``)."""
    where = tmp_path_factory.mktemp("own_task")
    shutil.copytree(REPO / "recipes", where / "recipes")
    steps = _steps()
    assert len(steps) == 2 and sum(len(commands) for commands, _ in steps) == 5
    with pytest.MonkeyPatch.context() as patch:
        for commands, shown in steps:
            printed = ""
            for words in commands:
                stdout, stderr = _run(words, where, patch)
                printed += stderr + stdout  # the messages of each command, then its result
            _assert_shows(shown, printed)
    return where


def test_the_readme_commands_run_and_train_on_equation_3_with_partial_credit(own_runs: Path, trl_signal) -> None:
    """Your verifier's 0.5 and your grader's hacks reach TRL as equation 3 says, group by group."""
    run = own_runs / "runs" / "my_task_gar"
    told_apart = trl_signal.assert_equation_3(run, 8)
    assert told_apart >= 1
    graded = [json.loads(line) for line in (run / "grading.jsonl").read_text().splitlines()]
    rewards = {reward for group in graded for reward in group["rewards"]}
    assert rewards <= {0.0, 0.5, 1.0} and 0.5 in rewards  # partial credit reached the grader
    assert {group["task_id"] for group in graded} <= {f"odd-{i}" for i in range(24)}  # the task_id column names it


def test_chat_prompts_reach_the_verifier_as_messages(own_runs: Path, trl_signal) -> None:
    run = own_runs / "runs" / "my_task_chat"
    trl_signal.assert_equation_3(run, 8)
    logged = pd.concat(pd.read_parquet(p) for p in sorted((run / "completions").glob("*.parquet")))
    assert isinstance(logged["prompt"].iloc[0][0], dict)  # TRL kept the chat messages
    assert logged["whileai_reward"].max() > 0  # the verifier read the completions' messages


def test_the_environment_is_reset_with_its_row_and_read_by_the_verifier(own_runs: Path) -> None:
    run = own_runs / "runs" / "my_desk_gar"
    logged = pd.concat(pd.read_parquet(p) for p in sorted((run / "completions").glob("*.parquet")))
    last = [prompt[-1]["content"] for prompt in logged["prompt"]]
    assert all(text.endswith("?\nYou may look words up before you answer.") for text in last)  # reset's answer
    state = json.loads((run / "trainer_state.json").read_text())
    failures = [
        entry["whileai/verifier_failures"] for entry in state["log_history"] if "whileai/verifier_failures" in entry
    ]
    assert failures and not any(failures)  # the verifier got its environments every batch
    assert json.loads((run / "spread_gate.json").read_text())["verdict"] == "yes"  # gated on the shipped rollouts


def test_parquet_rows_are_the_jsonl_rows() -> None:
    from whileai.config.build import train_setup
    from whileai.config.load import load_recipe
    from whileai.tasks.load import load_task

    recipe = REPO / "recipes" / "my_task_gar.yaml"
    jsonl = load_task(train_setup(load_recipe(recipe)))
    parquet = load_task(train_setup(load_recipe(recipe, ["data.dataset=my_task/problems.parquet"])))
    assert parquet.rows == jsonl.rows and len(jsonl.rows) == 24


def test_a_datasets_name_without_a_hub_is_one_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub

    from whileai.config.build import train_setup
    from whileai.config.load import load_recipe
    from whileai.errors import BadInput
    from whileai.tasks.load import load_task

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    loaded = load_recipe(REPO / "recipes" / "my_task_gar.yaml", ["data.dataset=someone/odd_words", "data.subset=v1"])
    setup = train_setup(loaded)
    with pytest.raises(BadInput, match=r"^data\.dataset: 'someone/odd_words' is no file or folder beside the recipe"):
        load_task(setup)


def test_a_verifier_trl_could_not_call_is_refused_before_training(tmp_path: Path) -> None:
    from whileai.config.build import train_setup
    from whileai.config.load import load_recipe
    from whileai.errors import BadInput
    from whileai.tasks.load import check_verifier_signature, load_task, load_verifier

    (tmp_path / "check.py").write_text("def check(prompts, completions, answer):\n    return [0.0] * len(prompts)\n")
    setup = train_setup(
        load_recipe(REPO / "recipes" / "my_task_gar.yaml", [f"verifier.function={tmp_path / 'check.py'}:check"])
    )
    task, verifier = load_task(setup), load_verifier(setup)
    with pytest.raises(BadInput, match=r"give it a \*\*kwargs parameter"):
        check_verifier_signature(verifier, task, "verifier")
    shipped = train_setup(load_recipe(REPO / "recipes" / "my_desk_gar.yaml"))
    check_verifier_signature(load_verifier(shipped), load_task(shipped), "verifier")  # takes environments
