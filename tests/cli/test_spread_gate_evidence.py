"""The spread gate says "yes" only on evidence: controls that tie or fall back count, identical passes already in a
group count with the copies, a grader that gives out still leaves a JSON report, and the bar counts judged groups."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import child_processes
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import whileai as wai
from whileai.cli.main import app
from whileai.grading.controls import ControlGroup, controls_report
from whileai.grading.gate import check_spread_groups

runner = CliRunner()

GRADERS = """
import time
import types

from whileai.errors import GraderUnavailable


def _passes(group):
    return [g for g in group if g["passed"]]


def _has_copy(group):
    texts = [g["completion"] for g in _passes(group)]
    return len(set(texts)) < len(texts)


def _by_length(group):
    passes = _passes(group)
    lengths = sorted({len(g["completion"]) for g in passes})
    return {"ranking": [[g["index"] for g in passes if len(g["completion"]) == n] for n in lengths]}


def by_length(group):
    return _by_length(group)


def position_ties_copies(group):
    # The order shown, except that two identical passes (the control's copy) make it tie everything.
    if _has_copy(group):
        return {"ranking": [[g["index"] for g in _passes(group)]]}
    return {"ranking": [g["index"] for g in _passes(group)]}


def position_fails_on_copies(group):
    if _has_copy(group):
        raise RuntimeError("two identical passes")
    return {"ranking": [g["index"] for g in _passes(group)]}


def by_length_flaky_controls(group):
    # Reads the content, but its controls fail on the groups marked "flaky".
    if _has_copy(group) and any("flaky" in g["completion"] for g in group):
        raise RuntimeError("flaky")
    return _by_length(group)


def by_reward(group):
    # The verifier's reward back as the ranking: it survives reordering and ties a copy, yet reads no content.
    passes = _passes(group)
    rewards = sorted({g["reward"] for g in passes}, reverse=True)
    return {"ranking": [[g["index"] for g in passes if g["reward"] == r] for r in rewards]}


def goes_down(group):
    texts = " ".join(g["completion"] for g in group)
    if "down" in texts:
        raise GraderUnavailable("the judge at http://127.0.0.1:9 did not answer after 3 tries")
    if "bad" in texts:
        raise ValueError("a bad group")
    return _by_length(group)


class Judge:
    # A slow grader with the HTTP judge's counter of completion tokens; in the calling process, as the judge is.
    in_process = True

    def __init__(self):
        self.stats = types.SimpleNamespace(tokens_out=0)

    def __call__(self, group):
        time.sleep(0.05)
        self.stats.tokens_out += 400
        return _by_length(group)


judge = Judge()


def slow(group):
    time.sleep(0.05)
    return _by_length(group)
"""


@pytest.fixture
def graders(tmp_path: Path) -> Path:
    path = tmp_path / "graders.py"
    path.write_text(GRADERS)
    return path


def write_rows(path: Path, groups: int = 10, text=None, reward=None) -> Path:
    """``groups`` groups of four: three passes and a failure; texts of different lengths unless ``text(g, k)``."""
    rows = [
        {
            "scenario_id": f"task-{g}",
            "reward": (reward(g, k) if reward else 1.0) if k < 3 else 0.0,
            "final_text": text(g, k) if text else "word " * (1 + (k * 7 + g) % 5) + str(k),
        }
        for g in range(groups)
        for k in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def spread(*args: object):
    return runner.invoke(app, ["spread", *(str(a) for a in args)])


# ---------------------------------------------------------------- controls that tie or fall back


def test_a_control_that_ties_what_the_first_grading_ordered_counts_as_tau_0(graders, tmp_path) -> None:
    result = spread(write_rows(tmp_path / "rows.jsonl"), "--grader", f"{graders}:position_ties_copies")
    assert result.exit_code == 1, result.stdout
    lines = result.stdout.splitlines()
    assert lines[1].startswith("spread: no.") and "10 of 10 controls tied every pass" in lines[1]
    assert lines[2].startswith("controls: agreement under reordering tau 0.00 (n=10 groups, 10 of them tied every")
    data = json.loads(spread(tmp_path / "rows.jsonl", "--grader", f"{graders}:position_ties_copies", "--json").stdout)
    assert data["verdict"] == "no" and data["controls"]["tied"] == 10 and data["controls"]["agreement_tau"] == 0.0


def test_controls_that_fall_back_are_too_few_to_say_yes(graders, tmp_path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl")
    result = spread(rows, "--grader", f"{graders}:position_fails_on_copies")
    assert result.exit_code == 1, result.stdout
    lines = result.stdout.splitlines()
    assert lines[1].startswith(
        "spread: too few controls measured to judge (0 of 10 control groups, at least 9 needed): 10 fell back "
        "(RuntimeError x10)"
    )
    assert "grader.judge.concurrency" in lines[1] and "grader.judge.timeout_s" in lines[1]
    assert lines[2] == (
        "controls: agreement under reordering: no control measured; identical passes: no control measured; 10 "
        "control(s) fell back (RuntimeError x10): 0 of 10 measured, at least 9 needed"
    )
    data = json.loads(spread(rows, "--grader", f"{graders}:position_fails_on_copies", "--json").stdout)
    assert data["verdict"] == "too few"
    controls = data["controls"]
    assert (controls["sent"], controls["measured"], controls["needed"], controls["failed"]) == (10, 0, 9, 10)
    assert controls["failed_kinds"] == {"RuntimeError": 10} and controls["ok"] is False
    assert controls["thresholds"]["min_measured"] == 0.9


@pytest.mark.parametrize(("flaky", "exit_code"), [(1, 0), (2, 1)])
def test_one_control_in_ten_may_fall_back(graders, tmp_path, flaky, exit_code) -> None:
    marked = write_rows(
        tmp_path / "rows.jsonl",
        text=lambda g, k: "word " * (1 + (k * 7 + g) % 5) + str(k) + (" flaky" if g < flaky else ""),
    )
    result = spread(marked, "--grader", f"{graders}:by_length_flaky_controls")
    assert result.exit_code == exit_code, result.stdout
    measured = 10 - flaky
    assert f"{flaky} control(s) fell back (RuntimeError x{flaky}): {measured} of 10 measured, at least 9 needed" in (
        result.stdout
    )
    verdict = result.stdout.splitlines()[1]
    assert verdict.startswith("spread: yes.") if exit_code == 0 else verdict.startswith("spread: too few controls")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 80), st.data())
def test_enough_controls_means_at_most_one_in_ten_fell_back(sent, data) -> None:
    failed = data.draw(st.integers(0, sent))
    control = ControlGroup(members=[1, 0, 1], copy=2, original=0)
    measured = ({0: 0.5, 1: 1.0}, {0: 1.0, 1: 0.5, 2: 1.0}, control)
    report = controls_report([measured] * (sent - failed) + [None] * failed)
    assert report.measured == sent - failed and report.needed == math.ceil(sent * 9 / 10)
    assert report.enough == (failed * 10 <= sent)
    assert report.ok == report.enough  # these controls agree and tie their copies


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=8, unique=True), st.floats(0, 1))
def test_a_control_that_ties_everything_the_first_grading_ordered_is_tau_0(first_scores, tie) -> None:
    size = len(first_scores)
    control = ControlGroup(members=[*range(size), 0], copy=size, original=0)
    first = dict(enumerate(first_scores))
    report = controls_report([(first, dict.fromkeys(range(size + 1), tie), control)])
    assert report.taus == [0.0] and report.tied == 1 and report.measured == 1
    flat = controls_report([(dict.fromkeys(range(size), 1.0), dict.fromkeys(range(size + 1), tie), control)])
    assert flat.taus == [] and flat.tied == 0  # nothing ordered, nothing to compare


# ---------------------------------------------------------------- identical passes already in a group


def test_identical_passes_already_in_a_group_count_with_the_copies(graders, tmp_path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        text=lambda g, k: "the same reply" if k < 2 else f"another reply {g}",
        reward=lambda g, k: (1.0, 0.9, 0.8)[k],
    )
    result = spread(rows, "--grader", f"{graders}:by_reward")
    assert result.exit_code == 1, result.stdout
    lines = result.stdout.splitlines()
    assert "identical passes got different scores in 10 of 20 identical-pass checks" in lines[1]
    assert lines[2].endswith(
        "identical passes tied in 10 of 20 checks (10 control copies, 10 groups that held identical passes; at most "
        "10% may differ); injection held in 10 of 10 (5 of 5 text, 5 of 5 JSON-shaped); surface copies scored higher: "
        "padding 0 of 4, formatting 0 of 3, claim 0 of 3 (at most 10% may, or half as many as scored lower)"
    )
    data = json.loads(spread(rows, "--grader", f"{graders}:by_reward", "--json").stdout)["controls"]
    assert (data["identical_copies"], data["identical_copies_ordered"]) == (20, 10)
    assert (data["identical_copies_in_groups"], data["identical_copies_in_groups_ordered"]) == (10, 10)
    tied = json.loads(spread(rows, "--grader", f"{graders}:by_length", "--json").stdout)
    assert tied["verdict"] == "yes" and tied["controls"]["identical_copies_in_groups_ordered"] == 0


def test_the_groups_own_identical_passes_are_read_from_the_first_grading() -> None:
    rows = [
        {"scenario_id": f"t{g}", "reward": 1, "final_text": "same" if k < 2 else "x" * (k + g + 1)}
        for g in range(4)
        for k in range(3)
    ]
    calls = []

    def first_apart(group):  # orders the identical pair the first time it sees a group, ties it after
        passes = [g["index"] for g in group if g["passed"]]
        calls.append(1)
        if len(calls) <= 4:
            return {"ranking": passes}
        return {"ranking": [passes]}

    report = wai.GroupwiseGrading(grader=first_apart).check_spread(rows, strict=False, controls=32)
    assert report.controls.existing == [False] * 4 and report.controls.orders_copies


# ---------------------------------------------------------------- a grader that gives out, under --json


def test_json_lists_what_was_counted_when_the_grader_gives_out(graders, tmp_path) -> None:
    def text(g: int, k: int) -> str:
        mark = " bad" if g == 0 else " down" if g == 69 else ""
        return "word " * (1 + (k * 7 + g) % 5) + str(k) + mark

    rows = write_rows(tmp_path / "rows.jsonl", groups=70, text=text)
    result = spread(rows, "--grader", f"{graders}:goes_down", "--json")
    assert result.exit_code == 4, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"] == "broken" and data["unavailable"] is True
    assert data["error"] == "the judge at http://127.0.0.1:9 did not answer after 3 tries"
    # The first batch of 64 groups came back (one fell back); the batch of six in flight counts as unreachable.
    assert data["failed_groups"] == {"ValueError": 1, "unreachable": 6} and data["attempted_groups"] == 70
    assert data["first_failures"]["unreachable"] == data["error"] and "grader" in data
    assert data["conclusion"].startswith("spread: broken. The grader is unavailable: the judge at")
    assert "whileai: error: the judge at http://127.0.0.1:9" in result.stderr
    plain = spread(rows, "--grader", f"{graders}:goes_down")
    assert plain.exit_code == 4 and plain.stdout == "" and "whileai: error: the judge" in plain.stderr


# ---------------------------------------------------------------- the bar of judged groups


def test_progress_counts_groups_done_of_groups_sent_controls_included() -> None:
    groups = [(f"t{g}", [(1.0, "", "x" * (k + 1)) for k in range(3)]) for g in range(5)]
    groups.append(("one pass", [(1.0, "", "a"), (0.0, "", "b")]))  # not sent: fewer than two passes

    def by_length(group):
        return {"ranking": sorted((g["index"] for g in group), key=lambda i: len(group[i]["completion"]))}

    seen: list[tuple[int, int]] = []
    check_spread_groups(
        wai.GroupwiseGrading(grader=by_length), groups, strict=False, progress=lambda *c: seen.append(c), controls=3
    )
    assert seen[-1] == (8, 8)  # 5 groups and 3 controls
    assert all(done <= sent for done, sent in seen)
    assert seen == sorted(seen)


def _bar(stderr: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stderr).replace("\r", "\n")


def test_the_bar_shows_groups_and_a_judges_tokens_per_second_on_a_terminal(graders, tmp_path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl")
    command = [sys.executable, "-m", "whileai.cli.main", "spread", str(rows), "--grader"]
    terminal = {**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": "100"}
    judged = child_processes.run([*command, f"{graders}:judge"], env=terminal, timeout=120)
    plain = child_processes.run([*command, f"{graders}:slow"], env=terminal, timeout=120)
    logged = child_processes.run([*command, f"{graders}:judge"], env={**os.environ, "TTY_COMPATIBLE": "0"}, timeout=120)
    assert judged.returncode == plain.returncode == logged.returncode == 0, judged.stderr
    shown = _bar(judged.stderr)
    assert "20/20 groups" in shown and " groups/s" in shown and " judge tok/s" in shown, shown  # 10 and 10 controls
    assert "rows" not in shown
    assert "20/20 groups" in _bar(plain.stderr) and "judge tok/s" not in plain.stderr
    assert "groups" not in logged.stderr and logged.stdout == judged.stdout
