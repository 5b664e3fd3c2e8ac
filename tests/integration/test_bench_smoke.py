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


def test_bench_watch_times_each_setting_and_prints_its_table(monkeypatch, capsys) -> None:
    """``bench_watch.py``'s runs are plain ``whileai train`` runs of the main job (other tests run it): here with
    given figures in their place, its settings, repeats and table (medians, the ratio to off, the extra calls)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_watch", REPO / "benchmarks" / "bench_watch.py")
    assert spec is not None and spec.loader is not None
    watch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watch)
    given = {
        "watch off": [{"seconds": 10.0}, {"seconds": 12.0}],
        "watch as shipped": [
            {"seconds": 11.0, "checks": 6, "controls": 10, "grader_calls": 200},
            {"seconds": 10.5, "checks": 6, "controls": 10, "grader_calls": 209},
        ],
        "every step, 2 controls, no budget": [{"seconds": 11.5, "checks": 60, "controls": 110, "grader_calls": 209}],
    }
    asked: list[tuple[str, int]] = []

    def train(overrides, folder, steps):
        name = next(n for n, o in watch.SETTINGS.items() if o == overrides)
        asked.append((name, steps))
        return given[name][sum(n == name for n, _ in asked) - 1]

    monkeypatch.setattr(watch, "train", train)
    monkeypatch.setattr(sys, "argv", ["bench_watch.py", "--repeats", "2", "--steps", "60"])
    assert watch.main() == 0
    assert [name for name, _ in asked] == [*watch.SETTINGS, "watch off", "watch as shipped"]  # the eager one once
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "60 steps of recipes/tiny_cpu_gar.yaml, one torch thread; median over runs"
    rows = {line[:36].strip(): line[36:].split() for line in lines[2:]}
    assert rows["watch off"] == ["11.0", "1.00x", "0", "0", "0"]
    assert rows["watch as shipped"] == ["10.8", "0.98x", "6", "10", "209", "4.8%"]
    assert rows["every step, 2 controls, no budget"] == ["11.5", "1.05x", "60", "110", "209", "52.6%"]


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
    assert "whileai: EndpointClient.run" in out and "aiohttp alone" in out and "CPU ms/call" in out


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
