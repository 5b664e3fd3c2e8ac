"""Benchmark: one ``trl_reward`` batch of 64 mixed groups judged over HTTP, concurrent against serial, then cached.

The judge is the test server of ``tests/judge_server.py`` in its own process, answering every call after 200 ms
(``--delay``), as a stand-in for a model server's latency. Measured side by side in one run, median of the repeats:

- one call on its own (the unit the target is stated in);
- the batch at concurrency 64 and 32 (all groups in flight, or two waves), and serial (concurrency 1), each after
  one unmeasured batch on the same judge (a warm connection pool, as every training step after the first has)
  and, for 64 and 32, also on a cold pool (the run's first batch, which opens every connection);
- the batch again on the answer cache the concurrent run filled: wall time and HTTP calls the server saw.

Targets (issue 5): at concurrency >= 32 the batch takes at most 3x one call's latency; the cached re-run makes
zero calls.

    python benchmarks/bench_judge.py                     # 64 groups of 4, 200 ms judge, median of 3
    python benchmarks/bench_judge.py --repeats 5 --delay 0.5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "judge_server.py"


def start_server(delay: float) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--delay", str(delay)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://"):
        process.kill()
        raise SystemExit(f"the test server did not start: {url!r}")
    return process, url


def server_requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/requests", timeout=5) as response:
        return int(json.load(response)["requests"])


def make_batch(groups: int, size: int) -> tuple[list[str], list[str]]:
    """``groups`` mixed groups of ``size``: passes with 1..size-1 tool calls, one failure each."""
    prompts, completions = [], []
    for g in range(groups):
        for i in range(size):
            prompts.append(f"refund order ORD-{1000 + g}")
            if i == size - 1:
                completions.append(f"I could not find ORD-{1000 + g}.")
            else:
                completions.append("<tool_call>lookup</tool_call>" * (i + 1) + f" refunded ORD-{1000 + g}")
    return prompts, completions


def verifier(prompts, completions, **kwargs):
    return [1.0 if "refunded" in c else 0.0 for c in completions]


def run_batch(
    url: str, concurrency: int, cache_dir: str | None, groups: int, size: int, warm_pool: bool = True
) -> dict[str, float]:
    from whileai import GroupwiseGrading
    from whileai.judge import JudgeConfig, JudgeGrader

    config = JudgeConfig(
        base_url=url,
        model="bench-judge",
        concurrency=concurrency,
        cache_dir=cache_dir,
        no_cache=cache_dir is None,
        timeout_s=30.0,
    )
    judge = JudgeGrader(config)
    try:
        # Start the loop and the connection pool (and import openai) outside the timed batch, as in training,
        # where the first batch pays it once per run.
        gar = GroupwiseGrading(grader=judge)
        reward = gar.trl_reward(verifier, num_generations=size)
        warm = [{"index": 0, "prompt": "warm-up", "completion": "x", "reward": 1.0, "passed": True}]
        judge.grade_groups([warm])
        if warm_pool:  # a batch before the measured one, as every training step after the first has had
            prompts, completions = make_batch(groups, size)
            reward(prompts=["warm " + p for p in prompts], completions=completions)
        prompts, completions = make_batch(groups, size)
        before, hits = server_requests(url), judge.stats.cache_hits
        start = time.perf_counter()
        shaped = reward(prompts=prompts, completions=completions)
        seconds = time.perf_counter() - start
        calls = server_requests(url) - before
        assert len(shaped) == groups * size and gar.stats.failed == 0, gar.stats
        return {"seconds": seconds, "calls": calls, "cache_hits": judge.stats.cache_hits - hits}
    finally:
        judge.close()


def one_call(url: str, repeats: int) -> float:
    from whileai.judge import JudgeConfig, JudgeGrader

    judge = JudgeGrader(JudgeConfig(base_url=url, model="bench-judge", no_cache=True))
    try:
        group = [
            {
                "index": 0,
                "prompt": "p",
                "completion": "<tool_call>a</tool_call> refunded",
                "reward": 1.0,
                "passed": True,
            },
            {"index": 1, "prompt": "p", "completion": "no", "reward": 0.0, "passed": False},
        ]
        judge(group)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            judge(group)
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        judge.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=64, help="mixed groups in the batch")
    parser.add_argument("--size", type=int, default=4, help="rollouts per group (num_generations)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the judge takes per call")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each concurrent measurement (median)")
    parser.add_argument("--serial-repeats", type=int, default=1, help="repeats of the serial run (slow)")
    args = parser.parse_args()

    process, url = start_server(args.delay)
    try:
        single = one_call(url, max(5, args.repeats))
        rows: list[tuple[str, float, float, float]] = []

        def measure(label: str, concurrency: int, repeats: int, warm_pool: bool = True) -> None:
            runs = [run_batch(url, concurrency, None, args.groups, args.size, warm_pool) for _ in range(repeats)]
            seconds = statistics.median(r["seconds"] for r in runs)
            rows.append((label, seconds, statistics.median(r["calls"] for r in runs), 0))

        measure("concurrency 64", 64, args.repeats)
        measure("concurrency 64, cold pool", 64, args.repeats, warm_pool=False)
        measure("concurrency 32", 32, args.repeats)
        measure("concurrency 32, cold pool", 32, args.repeats, warm_pool=False)
        measure("serial (concurrency 1)", 1, args.serial_repeats)

        cached = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as folder:
                run_batch(url, 32, folder, args.groups, args.size, warm_pool=False)  # fills the cache
                cached.append(run_batch(url, 32, folder, args.groups, args.size, warm_pool=False))
        rows.append(
            (
                "cached re-run (concurrency 32)",
                statistics.median(r["seconds"] for r in cached),
                max(r["calls"] for r in cached),
                statistics.median(r["cache_hits"] for r in cached),
            )
        )
    finally:
        process.terminate()
        process.wait(10)

    serial = next(r[1] for r in rows if r[0].startswith("serial"))
    print(
        f"one trl_reward batch: {args.groups} mixed groups of {args.size}, judge answering in "
        f"{args.delay * 1000:.0f} ms; one call {single * 1000:.0f} ms (median); median of {args.repeats}"
    )
    print(f"{'run':<32}{'wall s':>9}{'x one call':>12}{'vs serial':>11}{'HTTP calls':>12}{'cache hits':>12}")
    for label, seconds, calls, hits in rows:
        print(
            f"{label:<32}{seconds:>9.3f}{seconds / single:>11.2f}x{serial / seconds:>10.1f}x"
            f"{int(calls):>12}{int(hits):>12}"
        )
    c32 = next(r for r in rows if r[0] == "concurrency 32")
    cache = rows[-1]
    print(
        f"target: concurrency 32 within 3x one call: {'met' if c32[1] <= 3 * single else 'NOT met'} "
        f"({c32[1] / single:.2f}x); cached re-run makes zero calls: {'met' if cache[2] == 0 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
