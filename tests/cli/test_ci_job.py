"""The spread gate as a CI job: ``configs/ci/spread_gate.sh`` run as a CI runner runs it (bash, whileai on the
PATH, ``$GITHUB_STEP_SUMMARY`` set), failing the job on no spread and on a broken grader, with the verdict and the
``--json`` report in the job's summary; ``configs/ci/github_spread.yaml`` runs that script."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import child_processes
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "configs" / "ci" / "spread_gate.sh"
ROWS = REPO / "recipes" / "refund_rows.jsonl"

GRADERS = """
def flat(group):
    return {"factors": {g["index"]: 1.0 for g in group if g["passed"]}}


def broken(group):
    raise RuntimeError("the grader's own bug")
"""


def _job(tmp_path: Path, *arguments: str) -> tuple[int, str, str]:
    """The script as a CI step: in the job's folder, whileai on the PATH; (exit, stdout, the job's summary)."""
    summary = tmp_path / "summary.md"
    summary.write_text("")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = child_processes.run(["bash", str(SCRIPT), *arguments], cwd=tmp_path, env=env, timeout=300)
    return done.returncode, done.stdout, summary.read_text()


def test_a_grader_that_tells_passes_apart_passes_the_job(tmp_path: Path) -> None:
    code, stdout, summary = _job(tmp_path, str(ROWS), "--recipe", str(REPO / "recipes" / "refund_scripted.yaml"))
    assert code == 0, stdout
    assert summary == stdout  # the summary is what the log shows
    assert summary.startswith("### whileai spread gate passed: the grader tells passes apart\n")
    assert "spread: yes. The grader tells these passes apart." in summary
    report = json.loads((tmp_path / "spread.json").read_text())
    assert report["verdict"] == "yes" and json.dumps(report) in summary.replace("\n", "")


@pytest.mark.parametrize(
    ("grader", "code", "heading", "verdict"),
    [
        ("flat", 1, "failed: no spread", "spread: no."),
        ("broken", 4, "failed: the grader is broken or unreachable", "spread: unknown."),
    ],
)
def test_no_spread_or_a_broken_grader_fails_the_job(tmp_path: Path, grader, code, heading, verdict) -> None:
    (tmp_path / "graders.py").write_text(GRADERS)
    done, _, summary = _job(tmp_path, str(ROWS), "--grader", f"graders.py:{grader}")
    assert done == code
    assert summary.startswith(f"### whileai spread gate {heading}\n")
    assert verdict in summary
    assert json.loads((tmp_path / "spread.json").read_text())["verdict"] in ("no", "broken")


def test_bad_input_fails_the_job_with_the_error_in_the_summary(tmp_path: Path) -> None:
    done, _, summary = _job(tmp_path, "missing.jsonl", "--recipe", str(REPO / "recipes" / "refund_scripted.yaml"))
    assert done == 2
    assert "failed: exit 2" in summary and "whileai: error: missing.jsonl: no such file or folder" in summary


def test_the_github_workflow_runs_the_script_on_its_rows_and_recipe() -> None:
    workflow = yaml.safe_load((REPO / "configs" / "ci" / "github_spread.yaml").read_text())
    steps = workflow["jobs"]["spread"]["steps"]
    run = [step["run"] for step in steps if "run" in step]
    assert 'bash spread_gate.sh "$ROWS" --recipe "$RECIPE"' in run
    assert {"ROWS", "RECIPE"} <= set(workflow["env"])
    assert any(step.get("with", {}).get("path") == "spread.json" for step in steps)  # the report is kept
