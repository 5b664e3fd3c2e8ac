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


def test_the_holder_file_is_never_followed_or_waited_on(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    out = tmp_path / "run"
    out.mkdir()
    (out / HOLDER_FILE).symlink_to(target)
    with pytest.raises(BadInput, match="is no regular file"), run_lock(out, "whileai train"):
        pass
    assert target.read_text() == "keep me"
    (out / HOLDER_FILE).unlink()
    os.mkfifo(out / HOLDER_FILE)  # opened as found, a pipe would hang the run
    with pytest.raises(BadInput, match="is no regular file"), run_lock(out, "whileai train"):
        pass


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
