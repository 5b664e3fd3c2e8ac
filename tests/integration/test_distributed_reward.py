"""Groupwise grading across two real training processes (torch.distributed, gloo on CPU).

TRL hands each process its slice of the generation batch; with 3 and 5 completions per process and groups of 4, a
group straddles the two. The reward function must gather, grade whole groups once and return each process its
slice, so the two slices together equal the single-process result.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).with_name("distributed_worker.py")
COMPLETIONS = ["done", "x", "done done done", "done done", "y", "done", "done done", "z"]
PROMPTS = ["p"] * 4 + ["q"] * 4


def verifier(prompts, completions, **kwargs):
    return [1.0 if "done" in c else 0.0 for c in completions]


def by_length(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_processes_grade_whole_groups_once(tmp_path: Path) -> None:
    import whileai as wai

    expected = wai.GroupwiseGrading(grader=by_length).trl_reward(verifier, num_generations=4)(
        prompts=PROMPTS, completions=COMPLETIONS
    )
    port = str(_free_port())
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                child_processes.spawn(
                    [sys.executable, str(WORKER), str(rank), port, str(tmp_path)], env=env, stderr=subprocess.PIPE
                )
            )
            for rank in (0, 1)
        ]
        errors = [worker.communicate(timeout=180)[1] for worker in workers]
    for worker, err in zip(workers, errors, strict=True):
        assert worker.returncode == 0, err.decode()[-2000:]
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["out"] + rank1["out"] == expected
    assert len(rank0["out"]) == 3 and len(rank1["out"]) == 5
    assert rank0["graded"] == [2] and rank1["graded"] == []  # rank 0 graded both groups, once
    assert rank0["groups"] == 2 and rank1["groups"] == 0
    assert rank0["metrics"] == rank1["metrics"]  # every process logs the batch's figures


@pytest.mark.slow
@pytest.mark.parametrize("how", ["wait", "barrier"])
def test_the_others_wait_for_rank_0_s_gate_beyond_the_process_group_timeout(tmp_path: Path, how: str) -> None:
    """Rank 0 is busy for 6 s before training, the process group's timeout is 3 s: ``on_first_process`` hands both
    processes rank 0's verdict; a plain barrier (the control) is ended by the timeout."""
    port = str(_free_port())
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                child_processes.spawn(
                    [sys.executable, str(WORKER), str(rank), port, str(tmp_path), how],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
            for rank in (0, 1)
        ]
        outputs = [worker.communicate(timeout=180) for worker in workers]
    if how == "barrier":
        assert workers[1].returncode != 0 and not (tmp_path / "rank1.json").exists()
        return
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err.decode()[-2000:]
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [{"verdict": "yes"}] * 2
    assert b"not the process group's timeout" in outputs[0][0]
