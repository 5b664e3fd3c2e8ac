"""The user's own functions named when they fail: a verifier that raises or answers the wrong length or type, one
that asks for a column the data lacks or cannot take the columns it has, a grader written for the other mode, and a
model folder that holds no model, each refused with the function (its name, file and line) or the field, what came
back and the fix; ``whileai validate`` finds every one it can without building a model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import whileai as wai
from whileai.cli.main import app
from whileai.errors import BadInput
from whileai.rows.verdicts import VerifierFailures, verifier_rewards

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

FUNCTIONS = """
def needs_answer(prompts, completions, answer, **kwargs):
    return [1.0] * len(completions)


def no_kwargs(prompts, completions):
    return [1.0] * len(completions)


def one_short(prompts, completions, **kwargs):
    return [1.0] * (len(completions) - 1)


def raises(prompts, completions, **kwargs):
    return {}["oops"]


def a_rubric_grader(item, rubric):
    return {"solution": 1.0, "behavior": 1.0}
"""


def recipe(tmp_path: Path, **sections) -> Path:
    (tmp_path / "mine.py").write_text(FUNCTIONS)
    loaded = yaml.safe_load((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text())
    loaded.update(sections, output_dir=str(tmp_path / "run"))
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(loaded))
    return path


def validate(path: Path):
    return runner.invoke(app, ["validate", str(path)])


def test_validate_names_a_column_the_data_lacks_and_keywords_a_verifier_cannot_take(tmp_path: Path) -> None:
    result = validate(recipe(tmp_path, verifier={"function": "mine.py:needs_answer"}))
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert f"verifier.function needs_answer ({tmp_path / 'mine.py'}, line 2) needs 'answer'" in message
    assert "the dataset has no column for (its columns: task_id)" in message and "**kwargs" not in message
    planned = runner.invoke(app, ["train", str(tmp_path / "mine.yaml"), "--dry-run"])
    assert planned.exit_code == 2 and " ".join(planned.stderr.split()) == message  # the dry run agrees
    result = validate(recipe(tmp_path, verifier={"function": "mine.py:no_kwargs"}))
    assert result.exit_code == 2 and "no_kwargs (" in result.stderr and "give it a **kwargs parameter" in result.stderr


def test_validate_checks_the_verifier_of_a_recipe_without_a_model_section(tmp_path: Path) -> None:
    """A base recipe that an include completes with its model still has its verifier checked against its data."""
    path = recipe(tmp_path, verifier={"function": "mine.py:needs_answer"})
    base = yaml.safe_load(path.read_text())
    del base["model"]
    path.write_text(yaml.safe_dump(base))
    result = validate(path)
    assert result.exit_code == 2 and "needs 'answer'" in result.stderr, result.stderr


def test_validate_refuses_a_grader_written_for_the_other_mode(tmp_path: Path) -> None:
    result = validate(recipe(tmp_path, grader={"kind": "python", "function": "mine.py:a_rubric_grader"}))
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "grader a_rubric_grader (" in message and "advantage mode calls it as grader(group)" in message
    assert (
        "it takes (item, rubric): if it was written for reward mode, which calls grader(item, rubric), set " in message
    )


@pytest.fixture
def mine_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "mine_module.py").write_text(FUNCTIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    return importlib.import_module("mine_module")


def test_groupwise_grading_refuses_a_grader_it_cannot_call(mine_module) -> None:
    with pytest.raises(BadInput, match=r"grader a_rubric_grader \(.*mine_module.py, line \d+\): advantage mode"):
        wai.GroupwiseGrading(grader=mine_module.a_rubric_grader)
    with pytest.raises(BadInput, match=r"it takes \(group, extra, \*, notes\): give it the parameters of grader"):
        wai.GroupwiseGrading(grader=lambda group, extra, *, notes: {})  # fits neither mode: not told to switch
    wai.GroupwiseGrading(grader=mine_module.a_rubric_grader, mode="reward", rubrics={})  # its own mode


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("raises", "raised KeyError: 'oops' on a batch of 4; fix it, or have it return None where it cannot score"),
        ("one_short", "answered 3 rewards for 4 completions; return one reward per completion, in order"),
    ],
)
def test_a_failing_verifier_is_named_with_what_came_back_and_the_fix(mine_module, name: str, said: str) -> None:
    lines: list[str] = []
    verifier = getattr(mine_module, name)
    rewards = verifier_rewards(verifier, ["p"] * 4, ["a"] * 4, {}, VerifierFailures(lines.append, verifier))
    assert all(r != r for r in rewards) and len(lines) == 2  # unscorable, said once, and the empty batch said
    assert f"{name} (" in lines[0] and "mine_module.py, line " in lines[0] and said in lines[0]


def test_a_model_folder_without_a_model_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    model = {"name_or_path": str(tmp_path / "empty")}
    result = validate(recipe(tmp_path, model=model))
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert f"model.name_or_path: {tmp_path / 'empty'} holds no config.json and no tokenizer" in message


@pytest.mark.slow
def test_train_names_a_verifier_that_never_gave_a_reward_before_the_first_step(tmp_path: Path) -> None:
    path = recipe(tmp_path, verifier={"function": "mine.py:raises"}, spread={"sample": {"prompts": 2}})
    assert validate(path).exit_code == 0  # its signature is right: only a call finds it out
    result = runner.invoke(app, ["train", str(path), "data.num_prompts=8", "trainer.max_steps=1"])
    assert result.exit_code == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "the verifier gave no reward for any of the 16 completions sampled; the first: raises (" in message
    assert "raised KeyError: 'oops' on a batch of 8" in message and "Traceback" not in result.stderr
    line = FUNCTIONS.splitlines().index('    return {}["oops"]') + 1
    assert f"the first: raises ({tmp_path / 'mine.py'}, line {line}):" in message  # the line that raised
    debug = runner.invoke(app, ["--debug", "train", str(path), "data.num_prompts=8", "trainer.max_steps=1"])
    assert debug.exit_code == 2 and f'File "{tmp_path / "mine.py"}", line {line}, in raises' in debug.stderr


def test_a_rule_file_s_misspelt_key_gets_the_recipe_s_did_you_mean(tmp_path: Path) -> None:
    rows = REPO / "recipes" / "refund_rows.jsonl"
    (tmp_path / "rule.yaml").write_text("measure: chars\nordr: ascending\n")
    result = runner.invoke(app, ["spread", str(rows), "--grader", str(tmp_path / "rule.yaml")])
    assert result.exit_code == 2 and "grader.rule.ordr: unknown key; did you mean 'order'?" in result.stderr
    (tmp_path / "rule.yaml").write_text("rule:\n  measure: chars\n")  # a recipe's grader.rule, copied with its key
    assert runner.invoke(app, ["spread", str(rows), "--grader", str(tmp_path / "rule.yaml")]).exit_code == 0


CHECKS = """
from beside_first import first


def check(prompts, completions, **kwargs):
    from beside_later import later  # imported when called, in the process forked for the batch

    return [first(c) + later(c) for c in completions]


def grade(group):
    from beside_later import later

    passed = [item for item in group if item["passed"]]
    return {"ranking": [item["index"] for item in sorted(passed, key=lambda item: later(item["completion"]))]}
"""


def test_a_user_s_file_imports_the_modules_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``my_task/checks.py`` imports ``beside_first.py`` at import and ``beside_later.py`` when called, as ``python
    my_task/checks.py`` would, no PYTHONPATH: in validate, in the verifier's forked batch and in spread's worker."""
    import sys

    from whileai.grading.reference import load_callable

    task = tmp_path / "my_task"
    task.mkdir()
    (task / "checks.py").write_text(CHECKS)
    (task / "beside_first.py").write_text("def first(text):\n    return 0.5 if text.startswith('a') else 0.0\n")
    (task / "beside_later.py").write_text("def later(text):\n    return 0.5 if text.endswith('z') else 0.0\n")
    monkeypatch.setattr(sys, "path", list(sys.path))  # what loading adds goes with the test
    for name in ("beside_first", "beside_later"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    result = validate(recipe(tmp_path, verifier={"function": "my_task/checks.py:check"}))
    assert result.exit_code == 0, result.stderr
    verifier = load_callable(str(task / "checks.py:check"))
    rewards = verifier_rewards(verifier, ["p"] * 3, ["az", "b", "bz"], {}, VerifierFailures(print, verifier))
    assert rewards == [1.0, 0.0, 0.5]
    rows = REPO / "recipes" / "refund_rows.jsonl"
    spread = runner.invoke(app, ["spread", str(rows), "--grader", f"{task / 'checks.py'}:grade"])
    assert spread.exit_code in (0, 1) and "ModuleNotFoundError" not in spread.stderr + spread.stdout, spread.stderr
    assert "fell back" not in spread.stdout, spread.stdout
    for name in ("beside_first", "beside_later"):
        sys.modules.pop(name, None)


RAISING = """
def _lookup(table, key):
    return table[key]


def check(prompts, completions, **kwargs):
    table = {}
    return [_lookup(table, c) for c in completions]


def grade(group):
    table = {}
    return {"ranking": [_lookup(table, "x")]}
"""


def test_a_user_s_function_is_named_by_the_line_that_raised(tmp_path: Path) -> None:
    """Not the ``def`` line: the innermost line of the user's file in the traceback (here a helper of theirs), for a
    verifier in its forked batch and for a grader in its worker."""
    from whileai.grading.reference import load_callable

    (tmp_path / "raising.py").write_text(RAISING)
    verifier = load_callable(f"{tmp_path / 'raising.py'}:check")
    lines: list[str] = []
    verifier_rewards(verifier, ["p"] * 2, ["a", "b"], {}, VerifierFailures(lines.append, verifier))
    assert f"check ({tmp_path / 'raising.py'}, line 3): it raised KeyError: 'a'" in lines[0], lines
    rows = REPO / "recipes" / "refund_rows.jsonl"
    result = runner.invoke(app, ["spread", str(rows), "--grader", f"{tmp_path / 'raising.py'}:grade"])
    assert result.exit_code == 4 and f"grade ({tmp_path / 'raising.py'}, line 3) failed on" in result.stdout
