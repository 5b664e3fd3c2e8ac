"""Rollouts per second of the seeded agent on the built-in support scenarios.

Runs the offline path on 1,000 scenarios x 8 samples (8,000 rollouts) a few times and prints the median of each
stage, side by side: generating the scenarios, simulating with one thread and with four (the seeded agent is local,
so threads only show the GIL's cost), and scoring pass@1 and pass@8. The target is the issue's: the whole simulation
in under 10 seconds. Quote the ratios; the machine is shared and absolute times are noisy.

    python benchmarks/bench_simulate.py [--scenarios 1000] [--n 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from whileai.simulations.agents import seeded_agent
from whileai.simulations.passrate import score
from whileai.simulations.rollouts import simulate
from whileai.simulations.scenarios import load_scenarios

TARGET_SECONDS = 10.0  # issue 6: 1,000 scenarios x 8 samples in under 10 seconds


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``run``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=1000)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    scenarios = load_scenarios("builtin:all", n=args.scenarios, seed=0)
    agent = seeded_agent(seed=0)
    rollouts = args.scenarios * args.n
    rows = simulate(scenarios, agent, n=args.n, seed=0)

    stages = [
        ("load_scenarios", lambda: load_scenarios("builtin:all", n=args.scenarios, seed=0), None),
        ("simulate, 1 thread", lambda: simulate(scenarios, agent, n=args.n, seed=0), rollouts),
        ("simulate, 4 threads", lambda: simulate(scenarios, agent, n=args.n, seed=0, max_workers=4), rollouts),
        ("score + pass@1, pass@8", lambda: (score(rows).pass_at(1), score(rows).pass_at(args.n)), None),
    ]
    baseline = None
    print(f"{args.scenarios} scenarios x {args.n} samples = {rollouts} rollouts, median of {args.repeats}")
    print(f"{'stage':<24} {'median s':>9} {'rollouts/s':>11} {'vs 1 thread':>12} {'of 10 s target':>15}")
    for name, run, count in stages:
        seconds = median_seconds(run, args.repeats)
        if baseline is None and count is not None:
            baseline = seconds
        rate = f"{count / seconds:,.0f}" if count else "-"
        ratio = f"{seconds / baseline:.2f}x" if baseline and count else "-"
        print(f"{name:<24} {seconds:>9.3f} {rate:>11} {ratio:>12} {seconds / TARGET_SECONDS:>14.1%}")
    scored = score(rows)
    print(scored.pass_at(1))
    print(scored.pass_at(args.n))


if __name__ == "__main__":
    main()
