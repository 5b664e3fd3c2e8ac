"""`python benchmarks/figure8.py --quick`: the Figure 8 experiment's whole path on one short task (echo, 2 seeds per
arm, 3 steps), including its rerun of one seed, which must reproduce the recorded per-step numbers exactly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("trl")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_quick_experiment_runs_reproduces_and_writes_its_table(tmp_path: Path) -> None:
    runs, results = tmp_path / "runs", tmp_path / "results"
    smaller_gate = ["--set", "spread.sample.prompts=8"]  # the gate's sampling, a quarter of the main job's
    arguments = ["--quick", *smaller_gate, "--runs", str(runs), "--results", str(results)]
    done = child_processes.run(
        [sys.executable, "benchmarks/figure8.py", *arguments], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((results / "figure8_quick.json").read_text())
    assert data["reproduced"] == {"task": "echo", "arm": "gar", "seed": 1, "steps": 3, "identical": True}
    echo = data["tasks"]["echo"]
    assert sorted(echo["arms"]) == ["binary", "gar"]
    assert all(arm["seeds"] == ["1", "2"] for arm in echo["arms"].values())
    assert set(echo["differences"]) == {"pass rate", "length"}
    assert all(d["paired"] and d["n_a"] == 2 for d in echo["differences"].values())
    assert (results / "figure8_quick_echo.png").read_bytes()[:4] == b"\x89PNG"
    table = (results / "figure8_quick.md").read_text()
    assert "### echo: 3 steps, 2 seeds per arm, final window 2 steps" in table
    assert "every logged per-step number identical" in table
    # a second run reuses every finished run (same arguments); its rerun of one seed is the first run's, checked
    again_args = ["--quick", *smaller_gate, "--no-reproduce", "--runs", str(runs), "--results", str(results)]
    again = child_processes.run(
        [sys.executable, "benchmarks/figure8.py", *again_args], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count(": reused ") == 4


@pytest.mark.slow
def test_a_stopped_experiment_ends_its_runs_and_starts_no_more(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    runs = tmp_path / "runs"
    args = [sys.executable, "benchmarks/figure8.py", "--quick", "--runs", str(runs), "--results", str(tmp_path)]
    with child_processes.spawn(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as bench:
        deadline = time.monotonic() + 300
        while not list(runs.glob("echo/*/seed-*/recipe.yaml")):  # a run has started training
            assert bench.poll() is None and time.monotonic() < deadline, "no run started"
            time.sleep(0.2)
        running = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_run(int(p), runs)]
        assert running
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=120) != 0
        for pid in running:  # each run ended (and was reaped) before the benchmark exited
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    assert len(list(runs.glob("echo/*/seed-*/recipe.yaml"))) <= 2  # the two under way; none started after


def _is_run(pid: int, runs: Path) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"train" in command and any(str(runs).encode() in part for part in command)
