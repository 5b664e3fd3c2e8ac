"""The installed ``whileai`` script as a real subprocess: stdout, stderr and every exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "recipes" / "refund_rows.jsonl"
RECIPE = REPO / "recipes" / "refund_scripted.yaml"
SCRIPT = shutil.which("whileai")

pytestmark = pytest.mark.skipif(SCRIPT is None, reason="the whileai script is not installed")


def run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return child_processes.run([SCRIPT, *map(str, args)], timeout=120, env=env, cwd=REPO)


def test_exit_0_with_the_page_verdict() -> None:
    done = run("spread", ROWS, "--recipe", RECIPE)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "spread check: 4 grader scores over 2 group(s), std 0.250, 0% within 0.05 of the median 0.75",
        "spread: yes. The grader tells these passes apart.",
        "controls: agreement under reordering tau 1.00 (n=2 groups, at least 0.50 needed); identical passes tied in "
        "2 of 2 controls (at most 10% may differ); injection held in 2 of 2 (1 of 1 text, 1 of 1 JSON-shaped); "
        "surface copies scored higher: padding 0 of 1, formatting 0 of 1, claim untried (at most 10% may, or half "
        "as many as scored lower)",
    ]
    assert done.stderr == "whileai: hacks confirmed: 1 in 1 group(s) (refund-22), zeroed before scoring\n"


def test_exit_1_on_no_spread(tmp_path: Path) -> None:
    rows = tmp_path / "tied.jsonl"
    rows.write_text("".join(json.dumps({"scenario_id": "s", "reward": 1, "final_text": "x"}) + "\n" for _ in range(4)))
    done = run("spread", rows, "--recipe", RECIPE, "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["verdict"] == "no"


def test_exit_2_on_bad_input_without_traceback(tmp_path: Path) -> None:
    rows = tmp_path / "bad.jsonl"
    rows.write_text('{"scenario_id": "s", "reward": "yes", "final_text": "x"}\n')
    done = run("spread", rows, "--recipe", RECIPE)
    assert done.returncode == 2
    assert done.stderr.strip() == f"whileai: error: {rows} line 1: field 'reward' is not a number (got 'yes')"
    usage = run("spread", "--no-such-flag")
    assert usage.returncode == 2 and "No such option" in usage.stderr


def test_exit_3_names_the_extra(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "pyarrow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('pyarrow is not installed here')\n")
    (fake / "parquet.py").write_text("")
    rows = tmp_path / "rows.parquet"
    rows.write_bytes(b"PAR1")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = run("spread", rows, "--recipe", RECIPE, env=env)
    assert done.returncode == 3
    assert "pip install 'whileai-grpo[parquet]'" in done.stderr and "Traceback" not in done.stderr


def test_exit_4_when_the_grader_is_unreachable(tmp_path: Path) -> None:
    grader = tmp_path / "down.py"
    grader.write_text(
        "from whileai.errors import GraderUnavailable\n"
        "def rank(group):\n    raise GraderUnavailable('http://127.0.0.1:9/v1: connection refused')\n"
    )
    done = run("spread", ROWS, "--grader", f"{grader}:rank")
    assert done.returncode == 4 and "http://127.0.0.1:9/v1: connection refused" in done.stderr


def test_debug_shows_a_traceback(tmp_path: Path) -> None:
    done = run("--debug", "spread", tmp_path / "missing.jsonl")
    assert done.returncode != 0 and "Traceback" in done.stderr
