"""A verifier that never scores, on the tiny CPU recipe run by the console script: it works for the gate, then raises
on every batch of training (a sandbox that went down), its message quoting a model's text full of what a terminal
obeys. Training stops at a checkpoint after ``VERIFIER_BROKEN_BATCHES`` such batches with exit 4, naming the function,
its file, the line that raised and the error's kind; ``--debug`` shows the user's traceback; every line printed shows
the text as text; the record and ``report`` keep the failures; a resume with the verifier mended trains on."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import child_processes
import pytest
import yaml

pytest.importorskip("trl")
pytest.importorskip("pandas")

from whileai.defaults import VERIFIER_BROKEN_BATCHES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# A clear-screen, an OSC 8 hyperlink, an OSC 52 clipboard write and a right-to-left override, as a model may write
# them and a verifier's exception may quote them; and what whileai shows of them.
EVIL = "\x1b[2J \x1b]8;;https://evil.example\x1b\\link \x1b]52;c;ZXZpbA==\x07 \u202eevil"
SHOWN = "\\x1b[2J \\x1b]8;;https://evil.example\\x1b\\link \\x1b]52;c;ZXZpbA==\\x07 \\u202eevil"

CHECKS = f"""
from pathlib import Path

from whileai.tasks.load import echoes_digits

DOWN = Path(__file__).with_name("down")


def check(prompts, completions, **kwargs):
    if kwargs.get("trainer_state") is not None and DOWN.exists():  # training, not the gate's sample
        raise RuntimeError("sandbox down on " + {EVIL!r})
    return echoes_digits(prompts, completions, max_length=32, **kwargs)
"""
RAISES_AT = CHECKS.splitlines().index('        raise RuntimeError("sandbox down on " + ' + repr(EVIL) + ")") + 1
RUN = ["trainer.max_steps=5", "trainer.save_steps=100", "data.num_prompts=8", "spread.sample.prompts=2"]


def _train(recipe: Path, *extra: str) -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": "400", "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-m", "whileai.cli.main", "--debug", "train", str(recipe), *RUN, *extra]
    done = child_processes.run(args, env=env, timeout=600)
    return done.returncode, done.stdout, done.stderr


def test_a_verifier_that_never_scores_stops_at_a_checkpoint_and_resumes_once_mended(tmp_path: Path) -> None:
    (tmp_path / "checks.py").write_text(CHECKS)
    (tmp_path / "down").write_text("")
    recipe = yaml.safe_load((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text())
    recipe.update(verifier={"function": "checks.py:check"}, output_dir=str(tmp_path / "run"))
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "run"

    code, stdout, stderr = _train(path, "--skip-spread-gate")
    printed = stdout + stderr
    assert code == 4, printed[-4000:]
    assert "\x1b" not in printed and "\u202e" not in printed and "\x07" not in printed  # nothing a terminal obeys
    assert (
        f"the verifier gave no reward (32 response(s) so far): check ({tmp_path / 'checks.py'}, line {RAISES_AT})"
        in (stderr)
    )
    assert SHOWN in stderr and "All reward functions returned None" not in stderr  # TRL's, quoting the model raw
    step = VERIFIER_BROKEN_BATCHES  # one batch a step
    said = " ".join(stdout.split())
    assert (
        f"the verifier scored none of the completions of {step} batches in a row, training stopped at step {step}"
        in (said)
    )
    assert (
        f"check ({tmp_path / 'checks.py'}, line {RAISES_AT}): it raised RuntimeError: sandbox down on {SHOWN}" in said
    )
    assert f"checkpoint-{step} is in {out}. Fix the verifier, then continue with --resume" in said
    # --debug: the user's traceback, down to the line that raised.
    assert f'File "{tmp_path / "checks.py"}", line {RAISES_AT}, in check' in stderr
    run = json.loads((out / "whileai_run.json").read_text())
    assert run["status"] == "stopped by the verifier" and run["stopped_by_verifier"]["step"] == step
    assert run["verifier"]["kinds"] == {"RuntimeError": 32 * step} and run["verifier"]["unscored"] == 32 * step
    assert (out / f"checkpoint-{step}").is_dir() and not (out / "final").exists()

    report = child_processes.run([sys.executable, "-m", "whileai.cli.main", "report", str(out)], env={
        **os.environ, "COLUMNS": "400"})  # fmt: skip
    shown = report.stdout + report.stderr
    assert report.returncode == 0 and "\x1b" not in shown, shown
    assert "no completion logs" not in shown and "none scored" in shown and f"{32 * step} completions" in shown
    assert "verifier failures" in shown and f"{32 * step} (RuntimeError x{32 * step})" in shown, shown
    assert f"sandbox down on {SHOWN}" in shown

    (tmp_path / "down").unlink()  # the sandbox is back
    code, stdout, stderr = _train(path, "--skip-spread-gate", "--resume")
    assert code == 0, (stdout + stderr)[-4000:]
    assert f"resuming from checkpoint-{step}" in stderr
    unscored, completions = 32 * step, 32 * 5  # the failures before the checkpoint are the run's too
    said = f"trained 5 steps, {unscored} of {completions} completions unscored by the verifier ({unscored} failed);"
    assert said in stdout
    run = json.loads((out / "whileai_run.json").read_text())
    assert run["status"] == "finished" and run["steps"] == 5 and (out / "final").is_dir()
    assert run["verifier"]["kinds"] == {"RuntimeError": unscored} and run["verifier"]["completions"] == completions
