"""The spread gate as a CI job: ``configs/ci/spread_gate.sh`` run as a CI runner runs it (bash, whileai on the
PATH, ``$GITHUB_STEP_SUMMARY`` set), failing the job on no spread, too few and a broken grader, each headed as it is,
with the verdict, the controls and the ``--json`` report in the job's summary; ``configs/ci/github_spread.yaml``'s
own steps, run as written: no install without WHILEAI, and a judge's key that reaches whileai-grpo's
``whileai spread`` and never a program of the same name."""

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
import os


def flat(group):
    return {"factors": {g["index"]: 1.0 for g in group if g["passed"]}}


def broken(group):
    raise RuntimeError("the grader's own bug")


def all_hacks(group):
    return {"ranking": [], "hacks": [g["index"] for g in group if g["passed"]]}


def sees_the_key(group):
    with open("key_seen.txt", "a") as seen:
        seen.write(os.environ.get("OPENAI_API_KEY", "none") + " ")
    return {"factors": {g["index"]: 1 / (1 + g["completion"].count("<tool_call>")) for g in group if g["passed"]}}
"""

# A program of the same name, as the package index's `whileai` is: it writes down the environment it was given.
IMPOSTOR = """#!/usr/bin/env bash
env >> "$(dirname "$0")/impostor_env.txt"
if [ "${1:-}" = "--version" ]; then echo "whileai 0.131"; exit 0; fi
echo "usage: whileai [-h] {login,signup,init} ... whileai: error: argument command: invalid choice: '$1'" >&2
exit 2
"""

KEY = "sk-test-the-judges-secret-key-0123456789"


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
    assert "controls: agreement under reordering tau 1.00" in summary  # the gate's third line, as it printed it
    report = json.loads((tmp_path / "spread.json").read_text())
    assert report["verdict"] == "yes" and json.dumps(report) in summary.replace("\n", "")


@pytest.mark.parametrize(
    ("grader", "code", "heading", "verdict"),
    [
        ("flat", 1, "failed: no spread", "spread: no."),
        ("all_hacks", 1, "failed: too few scores, groups or controls to judge", "spread: too few scores to judge"),
        ("broken", 4, "failed: the grader is broken or unreachable", "spread: broken."),
    ],
)
def test_no_spread_or_a_broken_grader_fails_the_job(tmp_path: Path, grader, code, heading, verdict) -> None:
    (tmp_path / "graders.py").write_text(GRADERS)
    done, _, summary = _job(tmp_path, str(ROWS), "--grader", f"graders.py:{grader}")
    assert done == code, summary
    assert summary.startswith(f"### whileai spread gate {heading}\n")
    assert verdict in summary
    word = json.loads((tmp_path / "spread.json").read_text())["verdict"]
    assert verdict.startswith(f"spread: {word}")  # one word for the verdict, in the text and in the JSON


def test_a_grader_module_that_ends_the_process_at_import_fails_the_job(tmp_path: Path) -> None:
    (tmp_path / "leaves.py").write_text("import os\nos._exit(0)\n\ndef f(group):\n    return {}\n")
    done, _, summary = _job(tmp_path, str(ROWS), "--grader", "leaves.py:f")
    assert done == 1 and summary.startswith("### whileai spread gate failed: whileai spread exited 0 without a verdict")


def test_bad_input_fails_the_job_with_the_error_in_the_summary(tmp_path: Path) -> None:
    done, _, summary = _job(tmp_path, "missing.jsonl", "--recipe", str(REPO / "recipes" / "refund_scripted.yaml"))
    assert done == 2
    assert "failed: exit 2" in summary and "whileai: error: missing.jsonl: no such file or folder" in summary


WORKFLOW = yaml.safe_load((REPO / "configs" / "ci" / "github_spread.yaml").read_text())


def _step(name: str) -> dict:
    return next(step for step in WORKFLOW["jobs"]["spread"]["steps"] if step.get("name") == name)


def _run_step(step: dict, repository: Path, path: str, **workflow_env: str) -> tuple[int, str, str]:
    """A workflow step's ``run`` as the runner runs it: bash, in the repository's root, the workflow's env with the
    step's own over it (``${{ env.X }}`` and ``${{ secrets.OPENAI_API_KEY }}`` filled in), ``path`` first on PATH."""
    env = {**WORKFLOW["env"], **workflow_env}
    for name, value in step.get("env", {}).items():
        value = value.replace("${{ secrets.OPENAI_API_KEY }}", KEY)
        env[name] = value.replace("${{ env.KEY_ENV }}", env["KEY_ENV"])
    assert "${{" not in "".join(env.values())
    runner = {name: value for name, value in os.environ.items() if name != "OPENAI_API_KEY"}
    env = {**runner, **env, "PATH": f"{path}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = child_processes.run(["bash", "-e", "-c", step["run"]], cwd=repository, env=env, timeout=300)
    return done.returncode, done.stdout, done.stderr


def _repository(tmp_path: Path) -> Path:
    """A repository laid out as the workflow's comment says: the script in .github/, rows and recipe at the root."""
    repository = tmp_path / "repo"
    (repository / ".github").mkdir(parents=True)
    (repository / ".github" / "spread_gate.sh").write_text(SCRIPT.read_text())
    (repository / "graders.py").write_text(GRADERS)
    return repository


def test_the_workflow_installs_nothing_until_told_where_whileai_comes_from(tmp_path: Path) -> None:
    assert WORKFLOW["env"]["WHILEAI"] == ""  # no default a package index could answer with another project
    code, stdout, _ = _run_step(_step("install whileai-grpo"), _repository(tmp_path), str(tmp_path))
    assert code == 2 and "::error::set WHILEAI in this workflow to where whileai-grpo comes from" in stdout


def test_the_judges_key_reaches_whileai_spread_and_never_an_impostor(tmp_path: Path) -> None:
    repository = _repository(tmp_path)
    rows = str(REPO / "recipes" / "refund_rows.jsonl")
    gate = _step("whileai spread")
    # The package index's `whileai` on PATH: refused before it is given the rows or the key.
    impostor = tmp_path / "impostor"
    impostor.mkdir()
    (impostor / "whileai").write_text(IMPOSTOR)
    (impostor / "whileai").chmod(0o755)
    code, stdout, stderr = _run_step(gate, repository, str(impostor), ROWS=rows, RECIPE="none.yaml")
    assert code == 2, stderr
    assert "is not whileai-grpo's, or does not start: its --version says 'whileai 0.131'" in " ".join(stderr.split())
    assert stdout.startswith("### whileai spread gate failed: whileai-grpo is not installed\n")
    seen = (impostor / "impostor_env.txt").read_text()
    # Asked twice (--version, spread --help), never given the key.
    assert sum(line.startswith("PATH=") for line in seen.splitlines()) == 2 and KEY not in seen
    # whileai-grpo's own: the one call that grades has the key, under the recipe's name for it.
    real = str(Path(sys.executable).parent)
    code, stdout, stderr = _run_step(gate, repository, real, ROWS=rows, RECIPE="none.yaml")
    assert code == 2 and "none.yaml" in stderr  # past the check: whileai's own error on a missing recipe
    gate = {**gate, "run": gate["run"].replace('--recipe "$RECIPE"', "--grader graders.py:sees_the_key")}
    code, stdout, stderr = _run_step(gate, repository, real, ROWS=rows)
    assert code == 0, stderr
    assert set((repository / "key_seen.txt").read_text().split()) == {KEY}


BROKEN = """#!/usr/bin/env bash
echo 'Traceback (most recent call last):' >&2
echo '  File "whileai", line 5, in <module>' >&2
echo "ModuleNotFoundError: No module named 'rich'" >&2
exit 1
"""


def test_a_whileai_that_does_not_start_is_said_with_its_own_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "whileai").write_text(BROKEN)
    (broken / "whileai").chmod(0o755)
    rows = str(REPO / "recipes" / "refund_rows.jsonl")
    code, _, stderr = _run_step(_step("whileai spread"), _repository(tmp_path), str(broken), ROWS=rows)
    assert code == 2 and "(stderr: ModuleNotFoundError: No module named 'rich')" in " ".join(stderr.split())


def test_the_workflow_keeps_the_report() -> None:
    steps = WORKFLOW["jobs"]["spread"]["steps"]
    assert any(step.get("with", {}).get("path") == "spread.json" for step in steps)


def test_an_empty_secret_is_said_as_empty_not_as_unset(monkeypatch) -> None:
    from whileai.errors import BadInput
    from whileai.http.secrets import read_api_key

    monkeypatch.setenv("OPENAI_API_KEY", "")  # what a workflow step gets for a secret a fork's pull request lacks
    with pytest.raises(BadInput, match="which is set but empty"):
        read_api_key("OPENAI_API_KEY", field="grader.judge.api_key_env")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(BadInput, match="which is not set"):
        read_api_key("OPENAI_API_KEY", field="grader.judge.api_key_env")


def test_parquet_rows_without_the_parquet_extra_fail_the_job_saying_which_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [json.loads(line) for line in ROWS.open()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    (tmp_path / "no_extra" / "pyarrow").mkdir(parents=True)  # pyarrow as a runner without the extra has it: absent
    (tmp_path / "no_extra" / "pyarrow" / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "no_extra"))
    done, _, summary = _job(tmp_path, "rows.parquet", "--recipe", str(REPO / "recipes" / "refund_scripted.yaml"))
    assert done == 3 and "failed: an optional install is missing" in summary and "whileai-grpo[parquet]" in summary
    assert "./whileai[parquet]" in (REPO / "configs" / "ci" / "github_spread.yaml").read_text()
