"""``whileai report`` on the folder whileai's verl reward manager writes (grading.jsonl and whileai_verl.json)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.grading.group import GradedGroup

runner = CliRunner()


def grading_folder(folder: Path) -> Path:
    graded = GradedGroup("t", [1.0, 1.0, 0.0], [True, True, False], [1.0, 1.0, 0.0], [1.2, 0.8, 0.0])
    graded.graded, graded.factors, graded.scores, graded.label = True, {0: 1.0, 1: 0.5}, [1.0, 0.5], "uid-0"
    fallen = GradedGroup("t", [1.0, 0.0], [True, False], [1.0, 0.0], [1.0, 0.0], label="uid-1")
    fallen.fail("group incomplete", "group incomplete: 2 of 3 responses within 900 s")
    folder.mkdir()
    (folder / "grading.jsonl").write_text("".join(json.dumps(g.as_dict()) + "\n" for g in (graded, fallen)))
    figures = {"trainer": "verl", "groups": 2, "fallbacks": {"group incomplete": 1}, "late_responses": 1}
    figures["first_failures"] = {"group incomplete": fallen.reason}
    (folder / "whileai_verl.json").write_text(json.dumps(figures))
    return folder


def test_the_grader_s_figures_of_a_verl_run(tmp_path: Path) -> None:
    folder = grading_folder(tmp_path / "whileai")
    result = runner.invoke(app, ["report", str(folder)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "the grader's figures of a verl run" in result.output
    assert "2 groups, 2 mixed, 2 graded" in result.output
    assert "fell back: group" in result.output and "late responses       1" in result.output
    data = json.loads(runner.invoke(app, ["report", str(folder), "--json"]).output)
    entry = data["reports"][0]
    assert entry["kind"] == "grading" and entry["grader"]["fallbacks"] == {"group incomplete": 1}
    assert entry["figures"]["late_responses"] == 1


def test_the_responses_that_kept_their_verifier_rewards_are_shown_by_kind(tmp_path: Path) -> None:
    folder = grading_folder(tmp_path / "whileai")
    figures = json.loads((folder / "whileai_verl.json").read_text())
    figures.update(repeated_uid_responses=24, verifier_failures=3, groups_actor_lost=2)
    (folder / "whileai_verl.json").write_text(json.dumps(figures))
    result = runner.invoke(app, ["report", str(folder)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for line in ("repeated uids        24", "verifier failures    3", "groups actor lost    2"):
        assert line in result.output


def test_a_folder_without_grading_is_still_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "grading.jsonl" in result.output
