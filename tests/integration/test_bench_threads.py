"""`python benchmarks/bench_threads.py --quick` runs and prints its four-row table (the README quotes its full run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_threads_benchmark_prints_its_table() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_threads.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 4 and all(line.rstrip().endswith("x |") for line in rows)
