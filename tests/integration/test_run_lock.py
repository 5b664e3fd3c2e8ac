"""One process writes into a run folder at a time: real processes on one folder. Two ``whileai train`` started
together: one trains, the other exits 2 naming the folder and the holder; ``whileai eval`` beside a holder the
same; a holder killed with SIGKILL leaves the folder free."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
SHORT = ["trainer.max_steps=1", "data.num_prompts=8", "spread.sample.prompts=4", "trainer.save_steps=1"]
# A process that holds a run folder as whileai train holds it, until it is ended.
HOLD = (
    "import sys, time\nfrom pathlib import Path\nfrom whileai.training.folder import run_lock\n"
    "with run_lock(Path(sys.argv[1]), 'whileai train'):\n    print('held', flush=True)\n    time.sleep(300)\n"
)


def _whileai() -> str:
    beside = Path(sys.executable).with_name("whileai")
    return str(beside) if beside.exists() else str(shutil.which("whileai"))


def test_two_trainings_started_together_on_one_folder_train_once(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    command = [_whileai(), "train", str(RECIPE), *SHORT, f"output_dir={folder}"]
    with (
        child_processes.spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as first,
        child_processes.spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as second,
    ):
        outputs = [process.communicate(timeout=600) for process in (first, second)]
        done = [(p.returncode, out, err) for p, (out, err) in zip((first, second), outputs, strict=True)]
    codes = sorted(code for code, _, _ in done)
    assert codes == [0, 2], [(code, err[-2000:]) for code, _, err in done]
    refused = next(err for code, _, err in done if code == 2)
    assert f"{folder} is in use: whileai train, process " in refused and "output_dir=NEW" in refused
    graded = (folder / "grading.jsonl").read_text().splitlines()
    assert len({line.split('"group"')[1] for line in graded}) == len(graded)  # each group once: one run wrote
    assert not (folder / ".whileai-holder").exists()  # the holder's note goes with it


def test_eval_beside_a_holder_is_refused_and_a_killed_holder_frees_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(RECIPE, folder / "recipe.yaml")
    with child_processes.spawn([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout.readline().strip() == "held"
        evaluated = child_processes.run([_whileai(), "eval", str(folder)], timeout=300)
        assert evaluated.returncode == 2, evaluated.stderr
        said = f"whileai: error: {folder} is in use: whileai train, process {holder.pid} on "
        assert evaluated.stderr.startswith(said), evaluated.stderr
        trained = child_processes.run([_whileai(), "train", str(RECIPE), *SHORT, f"output_dir={folder}"], timeout=300)
        assert trained.returncode == 2 and said in trained.stderr, trained.stderr
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert (folder / ".whileai-holder").exists()  # a killed holder could not remove its note ...
    with child_processes.spawn([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True) as again:
        assert again.stdout.readline().strip() == "held"  # ... and the folder is free all the same
        assert f"process {again.pid} " in (folder / ".whileai-holder").read_text()
