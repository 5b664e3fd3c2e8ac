"""The benchmarks' commands as benchmarks/README.md shows them, at small sizes: each runs, prints its table with the
ratio to its limit and its target verdicts, and exits 0 (the figures themselves are not asserted: the machine is
shared)."""

from __future__ import annotations

import sys
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]


def bench(script: str, *args: str) -> str:
    done = child_processes.run(
        [sys.executable, f"benchmarks/{script}", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_bench_watch_small() -> None:
    pytest.importorskip("trl")
    out = bench("bench_watch.py", "--repeats", "1", "--steps", "4")
    assert "4 steps of recipes/tiny_cpu_gar.yaml" in out
    assert "watch off" in out and "watch as shipped" in out and "every step, 2 controls, no budget" in out


@pytest.mark.slow
def test_bench_spread_small() -> None:
    out = bench("bench_spread.py", "--rows", "4000", "--repeats", "1")
    assert "whileai spread (whole process)" in out and "vs json floor" in out
    assert "verdict: yes" in out and "peak memory < input size" in out


@pytest.mark.slow
def test_bench_judge_small() -> None:
    out = bench(
        "bench_judge.py", "--groups", "8", "--delay", "0.05", "--repeats", "1", "--serial-repeats", "1",
        "--cpu-calls", "100",
    )  # fmt: skip
    assert "default settings" in out and "x one call" in out
    assert "target: default settings within 1.2x" in out and "cached re-run makes zero calls: met" in out
    assert "whileai: EndpointClient.run" in out and "before: own HTTP/1.1" in out and "CPU ms/call" in out


@pytest.mark.slow
def test_bench_advantages_quick_without_peers() -> None:
    out = bench("bench_advantages.py", "--quick", "--threads", "1", "--no-peers")
    assert "whileai, torch path" in out and "whileai, numba kernel" in out
    assert "target <= 3x floor" in out and "target <= 4x floor" in out
    assert "torch path vs default path: max |diff|" in out and "verl targets: not measured" in out


@pytest.mark.slow
def test_bench_advantages_fails_loudly_on_a_missing_peer() -> None:
    """Without verl installed and without --no-peers, the script stops (exit 3) and names the fix."""
    pytest.importorskip("torch")
    try:
        import verl  # noqa: F401

        pytest.skip("verl is installed here")
    except ImportError:
        pass
    done = child_processes.run(
        [sys.executable, "benchmarks/bench_advantages.py", "--quick", "--threads", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--no-peers" in done.stdout + done.stderr


@pytest.mark.slow
def test_bench_simulate_small() -> None:
    out = bench("bench_simulate.py", "--scenarios", "20", "--n", "2", "--repeats", "1")
    assert "rollouts/s" in out and "pass@1" in out
