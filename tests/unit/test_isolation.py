"""The user's grader and verifier held to their limits whatever they do, with real processes: a pattern that keeps the
GIL, an answer slow to read, children left running, prints, ``sys.exit``; a grader's call costs its own group and a
verifier's its batch, within about the limit, and no process is left behind."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import child_processes
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai as wai
from whileai.grading.calls import GraderCalls
from whileai.isolation import Worker, plain
from whileai.rows.verdicts import VerifierFailures, verifier_rewards

REPO = Path(__file__).resolve().parents[2]


def by_order(group):
    return {"ranking": [g["index"] for g in group if g["passed"]]}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def grade(grader, prompts: list[str], timeout_s: float = 1.0):
    """Groups of [pass, pass, fail], one per prompt, graded in one batch; the groups and the seconds it took."""
    gar = wai.GroupwiseGrading(grader=grader, timeout_s=timeout_s)
    started = time.monotonic()
    groups = gar.grade_batch(
        [1, 1, 0] * len(prompts), [p for p in prompts for _ in range(3)], ["a"] * 3 * len(prompts), 3
    )
    return groups, time.monotonic() - started, gar


def test_a_pattern_that_keeps_the_gil_costs_its_group_within_the_limit() -> None:
    def backtracks(group):
        if group[0]["prompt"] == "hang":
            re.match(r"(a+)+$", "a" * 40 + "!")  # exponential in the C matcher, the GIL held throughout
        return by_order(group)

    groups, took, _ = grade(backtracks, ["ok", "hang", "ok"])
    assert [g.reason is None for g in groups] == [True, False, True]
    assert groups[1].failure == "grader timed out" and took < 10  # 1 s limit, 10x for a busy machine


class SlowToRead(Mapping):
    """An answer whose every read takes half a minute."""

    def __getitem__(self, key):
        time.sleep(30)
        return [0, 1]

    def __iter__(self):
        time.sleep(30)
        return iter(["ranking"])

    def __len__(self):
        return 1


def test_an_answer_slow_to_read_is_read_within_the_limit() -> None:
    groups, took, _ = grade(lambda group: SlowToRead(), ["ok"])
    assert groups[0].failure == "grader timed out" and took < 10


def test_what_a_grader_forks_is_ended_when_it_returns_and_when_it_is_given_up(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    def forks(group):
        import subprocess

        child = subprocess.Popen(["sleep", "60"])
        with open(pids, "a") as written:
            written.write(f"{child.pid}\n")
        if group[0]["prompt"] == "hang":
            time.sleep(60)
        return by_order(group)

    groups, took, gar = grade(forks, ["ok", "hang"])
    assert [g.reason is None for g in groups] == [True, False] and took < 10
    started = [int(pid) for pid in pids.read_text().split()]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(started) == 2 and not any(alive(pid) for pid in started)
    worker = gar._calls._workers[0]
    gar._calls.close()
    assert worker.pid is None


def test_a_grader_that_exits_is_a_counted_failure_of_its_group() -> None:
    def exits(group):
        if group[0]["prompt"] == "bye":
            sys.exit(3)
        return by_order(group)

    groups, _, gar = grade(exits, ["bye", "ok"])
    assert groups[0].failure == "SystemExit" and groups[1].reason is None
    assert gar.stats.fallbacks == {"SystemExit": 1}


def test_a_verifier_held_to_its_limit_leaves_its_batch_unscorable_and_nothing_running(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    def hangs(prompts, completions, **kwargs):
        import subprocess

        child = subprocess.Popen(["sleep", "60"])
        pids.write_text(str(child.pid))
        print("a verifier's own line")  # stderr, never the caller's stdout
        time.sleep(60)
        return [1.0] * len(completions)

    said: list[str] = []
    started = time.monotonic()
    rewards = verifier_rewards(hangs, ["p"] * 4, ["a"] * 4, {}, VerifierFailures(said.append, hangs), 1.0)
    assert all(r != r for r in rewards) and time.monotonic() - started < 10
    assert "hangs (" in said[0] and "it ran past its 1 s limit (verifier.timeout_s) on a batch of 4" in said[0]
    assert not alive(int(pids.read_text()))


def test_a_verifier_s_log_calls_reach_the_trainer_and_its_answer_is_read_there() -> None:
    logged: dict[str, float] = {}

    def logs(prompts, completions, log_metric, **kwargs):
        log_metric("mine/calls", 1.0)
        return [{"score": 1.0, "why": "ok"}, None]

    rewards = verifier_rewards(logs, ["p"] * 2, ["a", "b"], {"log_metric": logged.__setitem__}, VerifierFailures(print))
    assert rewards[0] == 1.0 and rewards[1] != rewards[1] and logged == {"mine/calls": 1.0}


GRADERS = """
import sys


def chatty(group):
    print("the grader talks")
    if group[0]["prompt"] == "refund ORD-22":
        sys.exit(3)
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}
"""


def test_what_a_grader_prints_never_reaches_the_json_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "graders.py").write_text(GRADERS)
    rows = [
        {"scenario_id": f"s{g}", "prompt": "refund ORD-22" if g == 0 else "p", "reward": r, "final_text": "x" * (k + 1)}
        for g in range(3)
        for k, r in enumerate((1, 1, 0))
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    whileai = Path(sys.executable).with_name("whileai")
    done = child_processes.run(
        [str(whileai), "spread", "rows.jsonl", "--grader", "graders.py:chatty", "--json"], cwd=tmp_path, timeout=120
    )
    report = json.loads(done.stdout)  # nothing but the report on stdout
    assert "the grader talks" in done.stderr and report["failed_groups"] == {"SystemExit": 1}
    assert done.returncode in (0, 1)  # a grader's exit is its group's, not the command's


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_any_json_answer_comes_back_as_it_is(answer) -> None:
    assert plain(answer) == answer and type(plain(answer)) is type(answer)


def test_a_worker_hands_back_json_answers_whole_in_order() -> None:
    worker = Worker(lambda request: request)
    answers = [{"ranking": [[0, 1], 2], "hacks": []}, {"factors": {"0": 0.5}}, [None, True, 1.5, "x"]]
    try:
        worker.send(list(enumerate(answers)))
        assert [worker.receive() for _ in answers] == list(enumerate(answers)) and not worker.pending
    finally:
        worker.kill()


def test_a_worker_that_dies_mid_batch_costs_that_call_and_the_rest_are_answered() -> None:
    def dies_on_two(x):
        if x == 2:
            os._exit(9)  # the process itself ends, not a raise
        return x

    calls = GraderCalls(timeout_s=5.0)
    answers = calls.run(dies_on_two, [1, 2, 3, 4])
    calls.close()
    assert answers[0] == 1 and isinstance(answers[1], RuntimeError) and answers[2:] == [3, 4]


def test_an_async_verifier_is_awaited_as_trl_would() -> None:
    async def checks(prompts, completions, **kwargs):
        return [float("done" in c) for c in completions]

    rewards = verifier_rewards(checks, ["p"] * 2, ["done", "no"], {}, VerifierFailures(print))
    assert rewards == [1.0, 0.0]


class GradeError(Exception):
    """An error of the user's whose constructor takes two arguments (pickle would call it with one)."""

    def __init__(self, group_id, why):
        super().__init__(f"{group_id}: {why}")


def test_an_error_of_the_user_s_own_type_is_counted_by_its_name_never_rebuilt_here() -> None:
    def raises(group):
        raise GradeError("g1", "no reference")

    groups, _, gar = grade(raises, ["ok"])
    assert groups[0].failure == "GradeError" and "GradeError: g1: no reference" in groups[0].reason
    assert gar.stats.fallbacks == {"GradeError": 1}


def test_a_process_the_grader_forks_never_answers_for_it() -> None:
    def forks_and_exits(group):
        if os.fork() == 0:
            sys.exit(0)  # the child comes back into the worker's code: it must not speak on the pipe
        time.sleep(0.2)
        return by_order(group)

    groups, _, _ = grade(forks_and_exits, ["ok", "ok"])
    assert [g.reason for g in groups] == [None, None]


def test_a_grader_module_that_exits_or_prints_at_import_is_named(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text('import sys\nprint("loud")\nsys.exit(3)\n')
    (tmp_path / "loud.py").write_text(
        'print("loud")\n\n\ndef g(group):\n    return {"ranking": [x["index"] for x in group if x["passed"]]}\n'
    )
    whileai = Path(sys.executable).with_name("whileai")
    rows = str(REPO / "recipes" / "refund_rows.jsonl")
    done = child_processes.run([str(whileai), "spread", rows, "--grader", "exits.py:g"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "importing" in done.stderr and "SystemExit: 3" in done.stderr
    done = child_processes.run([str(whileai), "spread", rows, "--grader", "loud.py:g", "--json"], cwd=tmp_path)
    assert json.loads(done.stdout)["verdict"] and "loud" in done.stderr  # stdout holds the report alone


SPAWNS = """
import subprocess
import time
from pathlib import Path


def g(group):
    child = subprocess.Popen(["sleep", "60"])
    Path("child.pid").write_text(str(child.pid))
    time.sleep(60)
"""


def test_sigterm_ends_the_command_s_graders_with_what_they_started(tmp_path: Path) -> None:
    import signal

    (tmp_path / "spawns.py").write_text(SPAWNS)
    whileai = Path(sys.executable).with_name("whileai")
    rows = str(REPO / "recipes" / "refund_rows.jsonl")
    with child_processes.spawn([str(whileai), "spread", rows, "--grader", "spawns.py:g"], cwd=tmp_path) as command:
        deadline = time.monotonic() + 60
        while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=60) == 143  # ended as Ctrl-C ends it, with 128 + SIGTERM
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # it would hold the caller's pipes past the command's end
