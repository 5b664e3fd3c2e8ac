"""Ctrl-C, SIGTERM and ``kill -9`` of a command while a grader or verifier call is in flight that started children
(one that ignores SIGINT, as a child of a shell script may) and a double-forked setsid daemon: the command ends at
once with its code and one line, and no process the call started outlives it or holds its output pipes. Each is
tried several times (a race shows in some tries only). Also: an answer cut after its length holds no caller, and a
call's process killed from outside is named as such."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = str(REPO / "recipes" / "refund_rows.jsonl")
WHILEAI = str(Path(sys.executable).with_name("whileai"))

# Writes the pids of what it started to ./pids: a child with SIGINT ignored, and a daemon (fork, setsid, fork).
STARTS = """
import os
import signal
import subprocess
import time


def _start():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the child: Ctrl-C alone would not end it
    _spawn()
    time.sleep(300)


def _spawn():
    child = subprocess.Popen(["sleep", "300"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open("pids", "a") as written:
                written.write(f"{os.getpid()}\\n")
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    with open("pids", "a") as written:
        written.write(f"{child.pid}\\n")


def grader(group):
    _start()


def verifier(prompts, completions, **kwargs):
    _start()
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def started(folder: Path) -> list[int]:
    """The pids the call wrote, once both are written (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = (folder / "pids").read_text().split() if (folder / "pids").exists() else []
        if len(pids) >= 2:
            return [int(p) for p in pids]
        time.sleep(0.05)
    raise AssertionError("the call never started its children")


def survivors(pids: list[int]) -> list[int]:
    """The pids still running after a moment's grace; each is killed, so that a failure leaves nothing behind."""
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def ended_by(signum: int, command: list[str], folder: Path, group: bool) -> tuple[int, str, float, list[int]]:
    """Start ``command`` in ``folder``, wait for its call's children, send ``signum`` (to its process group, as a
    terminal sends Ctrl-C, or to the command alone); its exit status, stderr, seconds to end, and survivors."""
    (folder / "pids").unlink(missing_ok=True)
    with child_processes.spawn(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        pids = started(folder)
        time.sleep(0.2)
        sent = time.monotonic()
        if group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        try:
            # communicate returns once every holder of the pipes is gone: the daemon and the child included
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            survivors(pids)
            raise AssertionError("the command's pipes were held open past its end") from None
        took = time.monotonic() - sent
    return process.returncode, stderr, took, survivors(pids)


@pytest.mark.parametrize(("signum", "group", "code", "said"), [
    (signal.SIGINT, True, 130, "whileai: interrupted (Ctrl-C)"),
    (signal.SIGTERM, False, 143, "whileai: interrupted (SIGTERM)"),
])  # fmt: skip
def test_ctrl_c_and_sigterm_end_spread_and_all_its_grader_started(signum, group, code, said, tmp_path: Path) -> None:
    (tmp_path / "starts.py").write_text(STARTS)
    command = [WHILEAI, "spread", ROWS, "--grader", "starts.py:grader", "grading.timeout_s=600"]
    for _ in range(5):
        status, stderr, took, left = ended_by(signum, command, tmp_path, group)
        assert status == code and stderr.strip().splitlines()[-1] == said, stderr
        assert took < 10 and not left, (took, left)  # it ends in a fraction of a second


def test_kill_9_of_spread_still_ends_all_its_grader_started(tmp_path: Path) -> None:
    (tmp_path / "starts.py").write_text(STARTS)
    command = [WHILEAI, "spread", ROWS, "--grader", "starts.py:grader", "grading.timeout_s=600"]
    for _ in range(3):
        status, _, _, left = ended_by(signal.SIGKILL, command, tmp_path, group=False)
        assert status == -signal.SIGKILL and not left


# A caller of a verifier, as training calls it, ended from outside while the verifier's fork is in flight.
VERIFIES = """
import sys

sys.path.insert(0, ".")
from starts import verifier
from whileai.rows.verdicts import VerifierFailures, verifier_rewards

verifier_rewards(verifier, ["p"] * 2, ["a", "b"], {}, VerifierFailures(print, verifier), 600.0)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_a_verifier_s_fork_ends_what_it_started_when_its_caller_ends(signum, tmp_path: Path) -> None:
    (tmp_path / "starts.py").write_text(STARTS)
    (tmp_path / "verifies.py").write_text(VERIFIES)
    for _ in range(3):
        _, _, _, left = ended_by(signum, [sys.executable, "verifies.py"], tmp_path, group=True)
        assert not left


# A grader (and a verifier) that writes the start of an answer into its own pipe, a length and a few bytes, then
# stops or returns: the caller must not wait past the call's limit for the rest.
HALF_ANSWERS = """
import gc
import os
import sys
import time
from multiprocessing.connection import Connection

from whileai.grading.calls import GraderCalls
from whileai.isolation import call_in_fork


def half_answer(x):
    pipe = next(o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed)
    os.write(pipe.fileno(), (4096).to_bytes(4, "big") + b"half")
    if x == "stops":
        time.sleep(300)
    return x


calls = GraderCalls(timeout_s=1.0)
started = time.monotonic()
answers = calls.run(lambda x: x if x == "ok" else half_answer(x), ["stops", "returns", "ok"])
calls.close()
print([type(a).__name__ if isinstance(a, BaseException) else a for a in answers], calls.timeouts)
late = call_in_fork(half_answer, 1.0, x="stops")
print(type(late).__name__, round(time.monotonic() - started))
"""


def test_an_answer_cut_after_its_length_is_a_timeout_within_the_limit(tmp_path: Path) -> None:
    (tmp_path / "half.py").write_text(HALF_ANSWERS)
    done = child_processes.run([sys.executable, "half.py"], cwd=tmp_path, timeout=60)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == "['GraderTimeout', 'GraderTimeout', 'ok'] 2", done.stderr
    seconds = int(lines[1].split()[1])
    assert lines[1].startswith("CallTimeout") and seconds < 30  # three limits of 1 s, 10x for a busy machine


def test_a_call_s_process_killed_from_outside_is_said_likely_killed_for_memory(tmp_path: Path) -> None:
    from whileai.grading.calls import GraderCalls
    from whileai.isolation import call_in_fork

    def killed(_=None):
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a cgroup's limit ends it

    calls = GraderCalls(timeout_s=30.0)
    (answer,) = calls.run(killed, [0])
    calls.close()
    assert "killed by SIGKILL, likely for memory" in str(answer)
    assert "killed by SIGKILL, likely for memory" in str(call_in_fork(killed, 30.0))


@pytest.mark.parametrize(("signum", "group", "code", "said"), [
    (signal.SIGINT, True, 130, "Ctrl-C"),
    (signal.SIGTERM, False, 143, "SIGTERM"),
])  # fmt: skip
def test_ctrl_c_and_sigterm_end_train_its_run_marked_interrupted(signum, group, code, said, tmp_path: Path) -> None:
    import json

    import yaml

    (tmp_path / "starts.py").write_text(STARTS)
    recipe = yaml.safe_load((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text())
    recipe["grader"] = {"kind": "python", "function": "starts.py:grader"}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    out = tmp_path / "run"
    command = [WHILEAI, "train", "recipe.yaml", f"spread.rows={ROWS}", f"output_dir={out}"]
    status, stderr, took, left = ended_by(signum, command, tmp_path, group)
    assert status == code and f"whileai: interrupted ({said}) before the first checkpoint" in stderr, stderr
    assert "Continue with: whileai train" in stderr.strip().splitlines()[-1] and took < 10 and not left
    assert json.loads((out / "whileai_run.json").read_text())["status"] == "interrupted"


HANGS = """
import time


def verifier(prompts, completions, **kwargs):
    with open("calls", "a") as counted:
        counted.write("call\\n")
    time.sleep(300)
"""


@pytest.mark.slow  # builds and samples a tiny model
def test_a_verifier_that_hangs_is_refused_at_the_first_group_past_its_limit(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "hangs.py").write_text(HANGS)
    recipe = yaml.safe_load((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text())
    recipe["verifier"] = {"function": "hangs.py:verifier", "timeout_s": 1}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    command = [WHILEAI, "train", "recipe.yaml", "spread.sample.prompts=4", f"output_dir={tmp_path / 'run'}"]
    done = child_processes.run(command, cwd=tmp_path, timeout=300)
    assert done.returncode == 2 and "ran past verifier.timeout_s (1 s) on sampled group 1 of 4" in done.stderr
    assert (tmp_path / "calls").read_text().split() == ["call"], done.stderr  # one group waited for, not four


# A module that waits at import, through its own ``except Exception``; one that starts a child and a daemon there.
WAITS_AT_IMPORT = """
import time

try:
    time.sleep(300)
except Exception:
    time.sleep(300)


def grader(group):
    return None
"""
# STARTS's children and daemon started at import; a grader that answers.
FORKS_AT_IMPORT = (
    STARTS
    + """
_spawn()


def grader(group):
    return {"ranking": [g["index"] for g in group if g["passed"]]}
"""
)


def test_a_module_that_waits_at_import_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "waits.py").write_text(WAITS_AT_IMPORT)
    command = [WHILEAI, "spread", ROWS, "--grader", "waits.py:grader"]
    started = time.monotonic()
    done = child_processes.run(command, cwd=tmp_path, timeout=120, env={**os.environ, "WHILEAI_IMPORT_TIMEOUT_S": "2"})
    assert done.returncode == 2 and time.monotonic() - started < 60, done.stderr
    assert f"importing {tmp_path / 'waits.py'} did not finish within 2 s" in done.stderr


def test_what_a_module_starts_at_import_ends_with_the_command(tmp_path: Path) -> None:
    (tmp_path / "forks.py").write_text(FORKS_AT_IMPORT)
    command = [WHILEAI, "spread", ROWS, "--grader", "forks.py:grader", "--json"]
    for _ in range(3):
        (tmp_path / "pids").unlink(missing_ok=True)
        try:  # the output is read to its end: every holder of the pipes is gone
            done = child_processes.run(command, cwd=tmp_path, timeout=60)
        except subprocess.TimeoutExpired:
            survivors(started(tmp_path))
            raise AssertionError("what the module started held the command's pipes") from None
        assert done.returncode in (0, 1), done.stderr
        assert not survivors(started(tmp_path))


def catches_sigterm(pid: int) -> bool:
    """Whether the process handles SIGTERM yet (Python does not by default: whileai's command line does, from its
    first import)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


def test_ctrl_c_at_any_moment_of_a_command_s_start_is_its_one_line_and_130(tmp_path: Path) -> None:
    (tmp_path / "starts.py").write_text(STARTS)
    command = [WHILEAI, "spread", ROWS, "--grader", "starts.py:grader", "grading.timeout_s=600"]
    for delay in (0.0, 0.1, 0.2, 0.4, 0.6, 0.9, 1.3):  # loading, reading the arguments, grading
        (tmp_path / "pids").unlink(missing_ok=True)
        with child_processes.spawn(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as process:
            deadline = time.monotonic() + 30
            while not catches_sigterm(process.pid) and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(delay)
            os.killpg(process.pid, signal.SIGINT)
            _, stderr = process.communicate(timeout=30)
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()] if (tmp_path / "pids").exists() else []
        assert process.returncode == 130 and stderr.strip().splitlines()[-1] == "whileai: interrupted (Ctrl-C)", (
            delay,
            stderr[-500:],
        )
        assert "Traceback" not in stderr and not survivors(pids)


def test_ctrl_c_ends_judge_eval_and_all_its_grader_started(tmp_path: Path) -> None:
    import json

    (tmp_path / "starts.py").write_text(STARTS)
    rows = [
        {"scenario_id": f"g{g}", "reward": float(q > 0), "final_text": "x" * (q + 1), "quality": q}
        for g in range(4)
        for q in (2, 1, 0)
    ]
    (tmp_path / "ranked.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = [WHILEAI, "judge-eval", "ranked.jsonl", "--grader", "starts.py:grader", "grading.timeout_s=600"]
    for _ in range(3):
        status, stderr, took, left = ended_by(signal.SIGINT, command, tmp_path, group=True)
        assert status == 130 and stderr.strip().splitlines()[-1] == "whileai: interrupted (Ctrl-C)", stderr
        assert took < 10 and not left, (took, left)


def test_a_module_that_ignores_ctrl_c_and_sigterm_at_import_leaves_the_command_s_own(tmp_path: Path) -> None:
    ignores = (
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    )
    (tmp_path / "ignores.py").write_text(ignores + STARTS)
    command = [WHILEAI, "spread", ROWS, "--grader", "ignores.py:grader", "grading.timeout_s=600"]
    for signum, group, code in ((signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)):
        status, stderr, took, left = ended_by(signum, command, tmp_path, group)
        assert status == code and took < 10 and not left, (stderr, took, left)


@pytest.mark.parametrize("given", ["abc", "-1", "nan"])
def test_an_import_limit_that_is_no_number_of_seconds_is_named(tmp_path: Path, given: str) -> None:
    (tmp_path / "plain.py").write_text("def grader(group):\n    return {}\n")
    env = {**os.environ, "WHILEAI_IMPORT_TIMEOUT_S": given}
    done = child_processes.run([WHILEAI, "spread", ROWS, "--grader", "plain.py:grader"], cwd=tmp_path, env=env)
    assert done.returncode == 2 and f"WHILEAI_IMPORT_TIMEOUT_S='{given}'" in done.stderr, done.stderr
