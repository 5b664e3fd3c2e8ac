"""One training process of tests/integration/test_distributed_reward.py: ``python distributed_worker.py RANK PORT DIR``.

It joins a two-process gloo group, calls a groupwise reward function on its slice of a batch whose first group
straddles both processes, and writes what it got back to DIR/rankN.json.

``python distributed_worker.py RANK PORT DIR wait|barrier``: a group whose timeout is 3 s, and rank 0 busy for 6 s
before training (a long spread gate). ``wait`` waits for it with ``on_first_process``; ``barrier`` with a plain
barrier of the group, which the timeout ends (the control that shows the timeout bites).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

import whileai as wai
from whileai.grading.trl import TorchGather
from whileai.training.distributed import on_first_process

COMPLETIONS = ["done", "x", "done done done", "done done", "y", "done", "done done", "z"]
PROMPTS = ["p"] * 4 + ["q"] * 4
SLICES = {0: (0, 3), 1: (3, 8)}  # uneven: the first group of 4 straddles the two processes


def verifier(prompts, completions, **kwargs):
    return [1.0 if "done" in c else 0.0 for c in completions]


def by_length(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}


def main(rank: int, port: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        graded: list[int] = []
        grading = wai.GroupwiseGrading(grader=by_length)
        reward = grading.trl_reward(
            verifier, num_generations=4, gather=TorchGather(), on_graded=lambda g, s: graded.append(len(g))
        )
        lo, hi = SLICES[rank]
        metrics: dict[str, float] = {}
        out = reward(
            prompts=PROMPTS[lo:hi],
            completions=COMPLETIONS[lo:hi],
            log_metric=lambda name, value: metrics.__setitem__(name, value),
        )
        Path(folder, f"rank{rank}.json").write_text(
            json.dumps({"out": out, "graded": graded, "groups": grading.stats.groups, "metrics": metrics})
        )
    finally:
        dist.destroy_process_group()


def prepare(rank: int, port: int, folder: str, how: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=3)
    )
    try:

        def gate() -> dict[str, str]:
            time.sleep(6.0)
            return {"verdict": "yes"}

        if how == "wait":
            verdict = on_first_process(gate, 2, print)
        else:
            verdict = gate() if rank == 0 else None
            dist.barrier()
        Path(folder, f"rank{rank}.json").write_text(json.dumps(verdict))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 4:
        prepare(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
