"""The spread gate's controls through `whileai spread`: a grader that reads position, or returns noise, or nothing,
is refused (exit 1); a broken grader is told apart from a flat one (exit 4); the shipped rule passes on simulated
rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app

runner = CliRunner()

GRADERS = """
import random

_rng = random.Random(0)


def constant(group):
    return {"ranking": [[g["index"] for g in group if g["passed"]]]}


def by_position(group):
    return {"ranking": [g["index"] for g in group if g["passed"]]}


def by_index_number(group):
    return {"ranking": sorted((g["index"] for g in group if g["passed"]), reverse=True)}


def seeded_random(group):
    passes = [g["index"] for g in group if g["passed"]]
    _rng.shuffle(passes)
    return {"ranking": passes}


def by_length(group):
    passes = [g for g in group if g["passed"]]
    lengths = sorted({len(g["completion"]) for g in passes})
    return {"ranking": [[g["index"] for g in passes if len(g["completion"]) == n] for n in lengths]}


def raises(group):
    return {"ranking": [1 / 0]}


def nonsense(group):
    return "I like the second one best"
"""


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def graders(tmp_path: Path) -> Path:
    path = tmp_path / "graders.py"
    path.write_text(GRADERS)
    return path


def write_rows(path: Path, identical: bool) -> Path:
    """10 groups of 4: three passes and a failure; the passes are identical, or of different lengths."""
    rows = [
        {
            "scenario_id": f"task-{g}",
            "reward": 1.0 if k < 3 else 0.0,
            "final_text": "the same reply" if identical else "word " * (1 + (k * 7 + g) % 5) + str(k),
        }
        for g in range(10)
        for k in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("grader", "identical", "message"),
    [
        ("constant", False, "std 0.000 is below 0.05"),
        ("by_position", True, "it follows the position of the rollouts"),
        ("by_position", False, "it follows the position of the rollouts"),
        ("by_index_number", False, "it follows the position of the rollouts"),
        ("seeded_random", False, "does not survive reordering"),
        ("by_position", False, "identical passes got different scores in 10 of 10 controls"),
        # the groups' own identical passes count with the copies
        ("by_position", True, "identical passes got different scores in 20 of 20 identical-pass checks"),
    ],
)
def test_a_grader_that_does_not_read_the_content_is_refused(graders, tmp_path, grader, identical, message) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", identical)
    result = invoke("spread", rows, "--grader", f"{graders}:{grader}")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert message in result.stdout
    lines = result.stdout.splitlines()
    assert (
        lines[0].startswith("spread check:") and lines[1].startswith("spread: no.") and lines[2].startswith("controls:")
    )


def test_a_grader_that_reads_the_content_passes(graders, tmp_path) -> None:
    result = invoke("spread", write_rows(tmp_path / "rows.jsonl", False), "--grader", f"{graders}:by_length", "--json")
    assert result.exit_code == 0, result.stdout
    controls = json.loads(result.stdout)["controls"]
    assert controls["agreement_tau"] == 1.0 and controls["agreement_groups"] == 10
    assert controls["identical_copies"] == 10 and controls["identical_copies_ordered"] == 0


@pytest.mark.parametrize(
    ("grader", "kind", "first"),
    [("raises", "ZeroDivisionError", "ZeroDivisionError: division by zero"), ("nonsense", "unusable answer", "dict")],
)
def test_a_broken_grader_is_exit_4_not_no_spread(graders, tmp_path, grader, kind, first) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", False)
    result = invoke("spread", rows, "--grader", f"{graders}:{grader}")
    assert result.exit_code == 4, result.stdout
    assert "spread: broken. The grader " in result.stdout and "failed on 10 of 10 group(s)" in result.stdout
    assert f"The grader {grader} (" in result.stdout and kind in result.stdout  # the user's function, named
    data = json.loads(invoke("spread", rows, "--grader", f"{graders}:{grader}", "--json").stdout)
    assert data["verdict"] == "broken" and data["failed_groups"] == {kind: 10}
    assert first in data["first_failures"][kind]
    debug = runner.invoke(app, ["--debug", "spread", str(rows), "--grader", f"{graders}:{grader}"])
    assert debug.exit_code == 4
    if grader == "raises":
        assert "Traceback" in debug.stderr and "1 / 0" in debug.stderr


def test_the_shipped_rule_passes_on_simulated_rollouts(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    simulated = invoke("simulate", "--scenarios", "builtin:refunds", "--n", "8", "--out", rows)
    assert simulated.exit_code == 0, simulated.stderr
    result = invoke("spread", rows)
    assert result.exit_code == 0, result.stdout
    assert "spread: yes." in result.stdout and "controls: agreement under reordering tau 1.00" in result.stdout


def test_controls_are_a_recipe_setting(graders, tmp_path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"grader: {{kind: python, function: '{graders}:by_position'}}\nspread: {{controls: 0}}\n")
    rows = write_rows(tmp_path / "rows.jsonl", False)
    off = invoke("spread", rows, "--recipe", recipe)
    assert off.exit_code == 0 and "controls:" not in off.stdout  # without controls, position passes: the old hole
    recipe.write_text(
        f"grader: {{kind: python, function: '{graders}:by_position'}}\nspread: {{min_agreement: -1.0, "
        "max_ordered_copies: 1.0}\n"
    )
    assert invoke("spread", rows, "--recipe", recipe).exit_code == 0
