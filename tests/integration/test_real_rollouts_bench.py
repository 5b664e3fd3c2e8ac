"""``benchmarks/real_rollouts.py`` against the fake llama.cpp server (``tests/llama_server_fake.py``), no model: the
fake plays the agent (its tool calls as bare JSON in the text, as a small model on llama.cpp writes them) and the
judge. Checked: the rollouts ran their JSON calls and carry a reference read off the transcripts, the rules and the
judge arm each made a table row of ``whileai spread`` and ``whileai judge-eval``, the section went into the page
beside the other sections, and the server's process group is gone after the run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "llama_server_fake.py"


@pytest.mark.slow
def test_the_rollouts_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "real_judge.md"
    out.write_text("<!-- real-judge -->\nthe seeded rows' table\n<!-- /real-judge -->\n")
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    done = child_processes.run(
        [sys.executable, "benchmarks/real_rollouts.py", "--model", str(model), "--family", "builtin:refunds",
         "--scenarios", "3", "--n", "3",
         "--server-cmd", f"{{python}} {FAKE} --model {{model}} --host {{host}} --port {{port}} --n_ctx {{n_ctx}}",
         "--arms", "scores:v3", "--out", str(out), "--work-dir", str(tmp_path / "work")],
        cwd=REPO, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    page = out.read_text()
    assert "the seeded rows' table" in page and "<!-- real-rollouts -->" in page
    section = page.split("<!-- real-rollouts -->", 1)[1]
    assert "9 rollouts, pass@1 1.00" in section and "9 made a tool call" in section
    assert "no_verification 9" in section  # the fake looks the order up first and never checks after
    table = [line for line in section.splitlines() if line.startswith("| rule") or line.startswith("| judge")]
    assert [line.split(" | ")[0] for line in table] == [
        "| rule: fewest tool calls (built-in)", "| rule: recipes/refund_scripted.yaml", "| judge: fake.gguf",
    ]  # fmt: skip
    raw = json.loads(out.with_suffix(".rollouts.json").read_text())
    assert raw["summary"]["rollouts"] == 9 and len(raw["groups"]) == 3
    assert all(run["judge_eval"]["returncode"] == 0 for run in raw["runs"])
    rows = [json.loads(line) for line in (tmp_path / "work" / "rollouts.jsonl").read_text().splitlines()]
    assert all(row["flaws"] == ["no_verification"] and row["quality"] == 0.9 for row in rows)
    assert "fake llama.cpp server on http://127.0.0.1:" in (tmp_path / "work" / "server.log").read_text()
    assert not _serving(model), "the server outlived the benchmark"


def _serving(model: Path) -> bool:
    """Whether a process serving ``model`` is still alive."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(FAKE).encode() in command and str(model).encode() in command:
            return True
    return False


@pytest.mark.slow
def test_rollouts_that_leave_nothing_to_grade_are_a_result_too(tmp_path: Path) -> None:
    out = tmp_path / "real_judge.md"
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    done = child_processes.run(
        [sys.executable, "benchmarks/real_rollouts.py", "--model", str(model), "--scenarios", "1", "--n", "1",
         "--server-cmd", f"{{python}} {FAKE} --model {{model}} --host {{host}} --port {{port}} --n_ctx {{n_ctx}}",
         "--out", str(out), "--work-dir", str(tmp_path / "work")],
        cwd=REPO, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    section = out.read_text()
    assert "1 rollouts" in section and "The graders had 0 group(s) with two passes or more" in section
    assert "none was run" in section and "| rule" not in section
    assert json.loads(out.with_suffix(".rollouts.json").read_text())["groups"] == []
