"""`python benchmarks/bench_threads.py --quick` runs and prints its four-row table (the README quotes its full run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_threads_benchmark_prints_its_table() -> None:
    command = [sys.executable, str(REPO / "benchmarks" / "bench_threads.py"), "--quick"]
    with child_processes.spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO) as process:
        stdout, stderr = process.communicate(timeout=900)  # the benchmark and its busy process end with the block
    assert process.returncode == 0, stderr[-2000:]
    rows = [line for line in stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 4 and all(line.rstrip().endswith("x |") for line in rows)
