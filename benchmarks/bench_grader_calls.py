"""What holding the user's grader and verifier to their limits costs: a call in the calling process (on a thread, the
mechanism before whileai.isolation, still what ``in_process = True`` gets), through a long-lived worker process
(graders), and in a process forked for the call (verifiers), side by side in one run.

- grader: ``GroupwiseGrading.grade_batch`` on 64 groups of 8 with a plain ranking function, per group;
- gate: ``check_spread_rows`` on 500 groups of 8 with the same function and its 32 control groups;
- verifier: one TRL batch of 32 completions through ``verifier_rewards``, in this process and forked, at this
  process's size and with 1 GiB more held (a fork copies the page tables: it grows with the process);
- the main job: whether its grader (the scripted rule) and verifier (``echoes_digits``) take either path.

Run: ``python benchmarks/bench_grader_calls.py`` (about a minute; ``--repeats 3``). Medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable

import torch  # a training process holds torch: the fork cost is measured at its size

import whileai as wai
from whileai.grading.gate import check_spread_rows
from whileai.rows.verdicts import VerifierFailures, _in_process, verifier_rewards


def ranking(group):
    passes = sorted((g for g in group if g["passed"]), key=lambda g: len(g["completion"]))
    return {"ranking": [g["index"] for g in passes]}


def in_process(group):
    return ranking(group)


in_process.in_process = True  # type: ignore[attr-defined]


def verifier(prompts, completions, **kwargs):
    return [float("done" in c) for c in completions]


def in_process_verifier(prompts, completions, **kwargs):
    return verifier(prompts, completions)


in_process_verifier.in_process = True  # type: ignore[attr-defined]


def median_s(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def batch(groups: int) -> tuple[list[float], list[str], list[str]]:
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0] * groups
    prompts = [f"p{i // 8}" for i in range(8 * groups)]
    completions = [("x" * (i % 7 + 1)) + " done" for i in range(8 * groups)]
    return rewards, prompts, completions


def grader_rows(grader: Callable[..., object], repeats: int) -> float:
    """Seconds a group: a fresh object each run, so its worker's start is counted once a batch."""
    rewards, prompts, completions = batch(64)
    work = lambda: wai.GroupwiseGrading(grader=grader).grade_batch(rewards, prompts, completions, 8)  # noqa: E731
    return median_s(work, repeats) / 64


def gate(grader: Callable[..., object], repeats: int) -> float:
    rewards, prompts, completions = batch(500)
    rows = [
        {"scenario_id": p, "reward": r, "final_text": c} for r, p, c in zip(rewards, prompts, completions, strict=True)
    ]
    work = lambda: check_spread_rows(wai.GroupwiseGrading(grader=grader), rows, strict=False, controls=32)  # noqa: E731
    return median_s(work, repeats)


def verifier_batch(function: Callable[..., object], repeats: int) -> float:
    _, prompts, completions = batch(4)
    failures = VerifierFailures(print)
    return median_s(lambda: verifier_rewards(function, prompts, completions, {}, failures), repeats)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    r = args.repeats
    thread, worker = grader_rows(in_process, r), grader_rows(ranking, r)
    gate_thread, gate_worker = gate(in_process, r), gate(ranking, r)
    small = rss_mib()
    here, forked = verifier_batch(in_process_verifier, r), verifier_batch(verifier, r)
    held = torch.ones(256 * 1024 * 1024)  # 1 GiB more, touched
    large = rss_mib()
    forked_large = verifier_batch(verifier, r)
    del held
    from whileai.grading.scripted import ScriptedGrader, ScriptedRule
    from whileai.tasks.load import echoes_digits

    print(f"grader and verifier calls, median of {r} (2-core shared CPU; ratios against the calling process)")
    print("| what | in the calling process | isolated | isolated / calling |")
    print("|---|---|---|---|")
    print(
        f"| grader, per group (64 groups of 8, worker) | {thread * 1e3:.2f} ms | {worker * 1e3:.2f} ms | "
        f"{worker / thread:.2f}x |"
    )
    print(
        f"| spread gate, 500 groups + 32 controls (worker) | {gate_thread:.2f} s | {gate_worker:.2f} s | "
        f"{gate_worker / gate_thread:.2f}x |"
    )
    print(
        f"| verifier, one batch of 32, process {small:.0f} MiB (fork) | {here * 1e3:.2f} ms | {forked * 1e3:.1f} ms "
        f"| {forked / here:.0f}x |"
    )
    print(
        f"| verifier, one batch of 32, process {large:.0f} MiB (fork) | {here * 1e3:.2f} ms | "
        f"{forked_large * 1e3:.1f} ms | {forked_large / here:.0f}x |"
    )
    rule = ScriptedGrader(ScriptedRule())
    print(
        f"main job (recipes/tiny_cpu_gar.yaml): its scripted rule has a batch method ({callable(rule.grade_groups)}: "
        f"no worker) and echoes_digits runs in process ({_in_process(echoes_digits)}): neither path is on it"
    )


if __name__ == "__main__":
    main()
