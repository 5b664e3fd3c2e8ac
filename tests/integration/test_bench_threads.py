"""``benchmarks/bench_threads.py``: its conditions, its busy process and its table, with given timings in place of
the four training runs it times (each is a plain ``whileai train`` of the main job, which other tests run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("bench_threads", REPO / "benchmarks" / "bench_threads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_threads_benchmark_times_each_condition_and_prints_its_table(monkeypatch, capsys) -> None:
    bench = _benchmark()
    timed: list[tuple] = []
    spinning: list[bool] = []

    def given(steps, threads, folder):
        timed.append((steps, threads, folder.name))
        spinning.append(folder.name.startswith("run-True"))
        return {1: 10.0, 2: 12.5}[threads] * (2 if folder.name.startswith("run-True") else 1), 30.0

    monkeypatch.setattr(bench, "train", given)
    monkeypatch.setattr(sys, "argv", ["bench_threads.py", "--quick"])
    bench.main()
    printed = capsys.readouterr().out.splitlines()
    assert timed == [(1, 1, "run-False-1"), (1, 2, "run-False-2"), (1, 1, "run-True-1"), (1, 2, "run-True-2")]
    assert printed[0] == "whileai train recipes/tiny_cpu_gar.yaml, 1 steps, 2 CPU cores"
    assert printed[3:] == [
        "| 1 | no | 10.0 s | 30.0 s | 1.00x |",
        "| 2 | no | 12.5 s | 30.0 s | 1.25x |",
        "| 1 | yes | 20.0 s | 30.0 s | 2.00x |",
        "| 2 | yes | 25.0 s | 30.0 s | 2.50x |",
    ]


def test_the_full_run_adds_the_main_job_as_shipped() -> None:
    bench = _benchmark()
    rows = [(1, False, 8.0, 20.0), (2, False, 9.0, 21.0), (1, True, 8.5, 20.5), (2, True, 22.4, 35.0)]
    text = bench.table(rows, (31.2, 48.9), 10)
    assert text.splitlines()[-1] == "as shipped (60 steps, default threads: 1), quiet: 31.2 s training, 48.9 s whole"
    assert "| 2 | yes | 22.4 s | 35.0 s | 2.80x |" in text
