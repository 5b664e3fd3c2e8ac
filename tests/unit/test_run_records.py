"""A run folder's records written whole and read as written: a full disk leaves a record as it was; a finished run
whose record did not survive is known from TRL's own state; the holder file is never followed or waited on; a run
whose recipe does not read is named, not graded by another rule; a URL whose password the run left out says so."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.errors import BadInput
from whileai.training import folder
from whileai.training.folder import HOLDER_FILE, finished_steps, run_lock, write_json


def test_a_full_disk_leaves_the_record_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "whileai_run.json"
    write_json(record, {"status": "finished", "steps": 60})

    def full(_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(folder.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_json(record, {"status": "failed"})
    assert json.loads(record.read_text()) == {"status": "finished", "steps": 60}
    assert [p.name for p in tmp_path.iterdir()] == ["whileai_run.json"]  # no partial left behind


def test_a_full_disk_rewrites_the_record_training_began_with_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_json(tmp_path / "whileai_run.json", {"status": "training", "spread": {"verdict": "yes"}})

    def full(_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(folder.os, "fsync", full)  # no new file can be written whole
    folder.mark_run(tmp_path, "failed", error="RuntimeError: file write failed")
    record = json.loads((tmp_path / "whileai_run.json").read_text())
    assert record == {"status": "failed", "spread": {"verdict": "yes"}, "error": "RuntimeError: file write failed"}


@pytest.mark.slow
def test_a_disk_that_refuses_a_checkpoint_is_named_and_the_record_says_so(tmp_path: Path) -> None:
    import resource
    import shutil
    import sys

    import child_processes

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "recipes" / "my_task", tmp_path / "my_task")
    (tmp_path / "r.yaml").write_text((repo / "recipes" / "my_task_gar.yaml").read_text())
    out = tmp_path / "run"
    # The tiny model (343 kB) fits under the limit, a checkpoint's optimizer state (699 kB) does not.
    limit = 500 * 1024

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    whileai = Path(sys.executable).parent / "whileai"
    overrides = [f"output_dir={out}", "trainer.max_steps=2", "trainer.save_steps=2", "spread.sample=null"]
    done = child_processes.run([str(whileai), "train", "r.yaml", *overrides], cwd=tmp_path, preexec_fn=limited)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert f"{out}: saving checkpoint-2 failed: this process may write files of {limit} bytes at most" in said
    assert "then continue with --resume" in said and "rerun with whileai --debug" not in said
    record = json.loads((out / "whileai_run.json").read_text())
    assert record["status"] == "failed" and record["disk"].startswith("saving checkpoint-2 failed")


def _finished_run(out: Path, record: str) -> None:
    state = {"global_step": 4, "max_steps": 4}
    (out / "checkpoint-4").mkdir(parents=True)
    (out / "checkpoint-4" / "trainer_state.json").write_text(json.dumps(state))
    (out / "final").mkdir()
    (out / "trainer_state.json").write_text(json.dumps(state))
    (out / "whileai_run.json").write_text(record)


@pytest.mark.parametrize(
    ("record", "finished"), [("", (4, 4)), ('{"status": "finished"}', (4, 4)), ('{"status": "failed"}', None)]
)
def test_a_finished_run_is_known_from_trl_s_state_when_its_record_is_gone(tmp_path: Path, record, finished) -> None:
    _finished_run(tmp_path, record)
    assert finished_steps(tmp_path, 4) == finished


@pytest.mark.parametrize("planted", ["symlink", "hard link", "pipe"])
def test_the_holder_file_is_made_anew_never_written_through_a_link(tmp_path: Path, planted: str) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    out = tmp_path / "run"
    out.mkdir()
    holder = out / HOLDER_FILE
    {"symlink": holder.symlink_to, "hard link": holder.hardlink_to, "pipe": lambda _: os.mkfifo(holder)}[planted](
        target
    )
    with run_lock(out, "whileai train"):  # a pipe opened as found would hang the run
        assert "whileai train, process" in holder.read_text() and holder.stat().st_nlink == 1
    assert target.read_text() == "keep me" and not holder.exists()
    holder.mkdir()
    with pytest.raises(BadInput, match="is no regular file"), run_lock(out, "whileai train"):
        pass


_KILLED_BEFORE_THE_RENAME = """
import os, signal, sys
from pathlib import Path
from whileai.training import folder
folder.os.replace = lambda *_: os.kill(os.getpid(), signal.SIGKILL)  # the kill between the write and the rename
folder.write_json(Path(sys.argv[1]), {"status": sys.argv[2]})
"""


def test_a_record_whose_rename_a_kill_cut_is_finished_by_the_next_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "run"
    out.mkdir()
    for status in ("old", "finished"):
        killed = subprocess.run(
            [sys.executable, "-c", _KILLED_BEFORE_THE_RENAME, str(out / "whileai_run.json"), status],
            start_new_session=True, timeout=60, check=False,
        )  # fmt: skip
        assert killed.returncode == -9
        if status == "old":  # written long before the other
            os.utime(next(out.glob(".whileai_run.json.*.partial")), (1, 1))
    cut = out / ".grading.jsonl.abc.partial"
    cut.write_text('{"step": 1}\n{"st')
    assert not (out / "whileai_run.json").exists() and len(list(out.glob(".*.partial"))) == 3
    with run_lock(out, "whileai eval"):
        assert sorted(p.name for p in out.iterdir()) == [HOLDER_FILE, "whileai_run.json"]
    assert json.loads((out / "whileai_run.json").read_text()) == {"status": "finished"}  # the newest, whole


def test_resume_rebuilds_a_lost_record_and_report_shows_the_gate_s_verdict(tmp_path: Path) -> None:
    _finished_run(tmp_path, "")
    (tmp_path / "whileai_run.json").unlink()
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 4, "max_steps": 4, "log_history": []}))
    (tmp_path / "spread_gate.json").write_text(json.dumps({"source": "rows", "verdict": "no", "skipped": None}))
    report = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert report.exit_code == 0 and "spread gate" in report.stdout and " no" in report.stdout, report.stdout
    tiny = Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu_gar.yaml"
    resumed = CliRunner().invoke(app, ["train", str(tiny), f"output_dir={tmp_path}", "trainer.max_steps=4", "--resume"])
    assert resumed.exit_code == 0 and "whileai_run.json was lost: rebuilt" in resumed.stdout + resumed.stderr
    record = json.loads((tmp_path / "whileai_run.json").read_text())
    assert record["status"] == "finished" and record["steps"] == 4 and record["spread"]["verdict"] == "no"


def test_a_run_whose_recipe_does_not_read_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    (run / "recipe.yaml").write_text("grader: [unclosed\n")
    result = CliRunner().invoke(app, ["spread", str(run)])
    assert result.exit_code == 2 and f"{run / 'recipe.yaml'} line 2" in result.stderr
    assert "built-in rule" not in result.stderr


def test_a_url_whose_password_a_run_left_out_says_so() -> None:
    from whileai.http.endpoint import check_base_url

    with pytest.raises(ValueError, match="left out the URL's password: give the URL again"):
        check_base_url("https://me:[secret hidden]@judge.example/v1")


def test_a_pipe_where_a_run_file_is_read_or_written_is_refused_not_waited_on(tmp_path: Path) -> None:
    from whileai.grading.watch import WatchLog
    from whileai.training.folder import GradingLog

    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    os.mkfifo(run / "recipe.yaml")
    result = CliRunner().invoke(app, ["spread", str(run)])
    assert result.exit_code == 2 and "not a regular file (a pipe, a device or a folder)" in result.stderr
    for log, name in ((GradingLog, "grading.jsonl"), (WatchLog, "watch.jsonl")):
        os.mkfifo(run / name)
        with pytest.raises(BadInput, match="is no regular file"):
            log(run / name)
