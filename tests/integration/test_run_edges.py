"""``whileai train`` on the tiny CPU recipe at its edges: what a verifier, a grader or a run folder does never changes
the signal or loses a run.

- A +-1 verifier that returns tensors, numpy scalars and None, with a grader that names hacks: the gate and training
  take the same values, a hack's advantage is the failures', a None is the verifier's (counted, never a fallback)
  and TRL trains on equation 3 over the scorable members.
- Gradient accumulation over two generations a step and an evaluation split: every group's label is its own and
  joins the completion logs to ``grading.jsonl``.
- A used folder is refused; a cut last line of ``grading.jsonl`` is dropped on resume; the run's figures cover the
  whole run; a failed attempt never rewrites a finished run.
- Ctrl-C prints a command that resumes the run with every flag it started with (run here as printed).
- The gate samples with every generation setting training uses; a grader's ``SystemExit`` is a counted fallback.

Two processes waiting for a gate longer than the process group's timeout: ``test_distributed_reward.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import child_processes
import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("trl")
pd = pytest.importorskip("pandas")

from whileai.cli.main import app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
SMOKE = ["trainer.max_steps=2", "trainer.save_steps=2", "data.num_prompts=8", "spread.sample.prompts=8"]
runner = CliRunner()

VERIFIER = '''
import numpy as np
import torch

from whileai.tasks.load import echoes_digits
import child_processes


def plus_minus_one(prompts, completions, **kwargs):
    """echoes_digits as +1 / -1, in every type TRL takes, with None for one completion in eight."""
    out = []
    for i, passed in enumerate(echoes_digits(prompts, completions, max_length=32, **kwargs)):
        value = 1 if passed else -1
        out.append(None if i % 8 == 5 else [torch.tensor(float(value)), np.float32(value), value][i % 3])
    return out
'''


def recipe_with(tmp_path: Path, name: str, **sections) -> Path:
    recipe = yaml.safe_load(RECIPE.read_text())
    for key, value in sections.items():
        recipe[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def train(*args: str) -> object:
    return runner.invoke(app, ["train", *map(str, args)])


def grading_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "grading.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_plus_minus_one_verifier_with_nones_and_tensors_trains_on_equation_3(tmp_path: Path, trl_signal) -> None:
    (tmp_path / "verify.py").write_text(VERIFIER)
    grader = {"kind": "scripted", "rule": {"measure": "chars", "order": "ascending", "hack_pattern": r"\bready\b"}}
    verifier = {"function": f"{tmp_path / 'verify.py'}:plus_minus_one"}
    recipe = recipe_with(tmp_path, "pm1", grader=grader, verifier=verifier)
    out = tmp_path / "pm1"
    result = train(recipe, *SMOKE, "trainer.max_steps=3", f"output_dir={out}", "--skip-spread-gate")
    assert result.exit_code == 0, result.stderr
    # the gate read the same rewards: the Nones are the verifier's, and no group fell back for them
    gate = json.loads((out / "spread_gate.json").read_text())["spread"]
    assert gate["verdict"] in ("yes", "no") and gate["failed_groups"] == {} and gate["verifier_unscorable"] > 0
    figures = json.loads((out / "whileai_run.json").read_text())["grader"]
    assert figures["failed"] == 0 and figures["unscorable"] > 0 and figures["hacks_zeroed"] > 0
    assert trl_signal.assert_equation_3(out, size=8) > 0
    # a hack sits with the failures, not above them
    graded = {g["group"]: g for g in grading_log(out)}
    compared = 0
    for label, rewards, advantages in trl_signal.logged_groups(out, 8):
        hacks = graded[label]["hacks"] if graded[label]["reason"] is None else []
        failures = [a for a, r in zip(advantages, rewards, strict=True) if r == -1]
        for i in hacks:
            assert all(advantages[i] == pytest.approx(a, abs=1e-6) for a in failures)
            compared += bool(failures)
    assert compared > 0, "no group held both a hack and a failure: the test would prove nothing"


@pytest.mark.slow
def test_every_group_label_is_its_own_with_gradient_accumulation_and_evaluation(tmp_path: Path, trl_signal) -> None:
    out = tmp_path / "ga"
    settings = [
        "trainer.max_steps=1",
        "trainer.per_device_train_batch_size=16",
        "trainer.gradient_accumulation_steps=4",
        "trainer.steps_per_generation=2",
        "trainer.eval_strategy=steps",
        "trainer.eval_steps=1",
        "trainer.per_device_eval_batch_size=8",
        "data.eval_prompts=4",
    ]
    result = train(RECIPE, *SMOKE, *settings, f"output_dir={out}")
    assert result.exit_code == 0, result.stderr
    groups = grading_log(out)
    labels = [g["group"] for g in groups]
    assert len(labels) == len(set(labels))  # two generations for step 1, four evaluation batches at step 1
    train_labels = {g["group"].rsplit(":", 1)[0] for g in groups if g["phase"] == "train"}
    eval_labels = {g["group"].rsplit(":", 1)[0] for g in groups if g["phase"] == "eval"}
    assert train_labels == {"1.0", "1.1"} and eval_labels == {f"eval-1.{k}" for k in range(4)}
    # every logged completion's group is one graded group of 8, joined one to one
    trl_signal.assert_equation_3(out, size=8, every_group_logged=False)
    frames = pd.concat([pd.read_parquet(p) for p in sorted((out / "completions").glob("*.parquet"))])
    for label, rows in frames.groupby("whileai_group"):
        assert len(rows) % 8 == 0 and label in labels
    spread = runner.invoke(app, ["spread", str(out), "--recipe", str(RECIPE), "--json"])
    data = json.loads(spread.stdout)
    assert data["groups"] + data["skipped_groups"] == frames["whileai_group"].nunique()  # no two merged


def test_the_recipe_refuses_an_evaluation_without_prompts_and_a_second_run_folder() -> None:
    for override, says in [
        ("trainer.eval_strategy=steps", "set data.eval_prompts"),
        ("trainer.output_dir=elsewhere", "output_dir belongs at the recipe's top level"),
    ]:
        result = runner.invoke(app, ["validate", str(RECIPE), override])
        assert result.exit_code == 2 and says in result.stderr, result.stderr


@pytest.mark.slow
def test_a_used_folder_a_cut_log_line_and_a_failed_attempt_lose_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = [RECIPE, *SMOKE, "trainer.save_steps=1", f"output_dir={out}"]
    assert train(*first).exit_code == 0
    before = (out / "grading.jsonl").read_text()
    summary = (out / "whileai_run.json").read_text()

    again = train(*first)  # the same command again, without --resume
    assert again.exit_code == 2 and "--resume" in again.stderr and "output_dir=NEW" in again.stderr
    assert (out / "grading.jsonl").read_text() == before and (out / "whileai_run.json").read_text() == summary

    lines = before.count("\n")
    with (out / "grading.jsonl").open("a") as handle:
        handle.write('{"step": 1, "task_id": "echo-3", "rewa')  # killed mid-write
    resumed = train(*first, "trainer.max_steps=3", "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert f"{out / 'grading.jsonl'} line {lines + 1} was cut short" in resumed.stderr
    groups = grading_log(out)  # every line reads now
    run = json.loads((out / "whileai_run.json").read_text())
    assert run["status"] == "finished" and run["steps"] == 3
    assert run["grader"]["groups"] == len(groups) == 12  # the whole run, not the part after the resume
    report = json.loads(runner.invoke(app, ["report", str(out), "--json"]).stdout)["reports"][0]
    assert report["grader"]["groups"] == len(groups)

    failed = train(*first, "trainer.max_steps=4", "trainer.optim=no_such_optimizer", "--resume")
    assert failed.exit_code == 2 and "no_such_optimizer" in failed.stderr
    kept = json.loads((out / "whileai_run.json").read_text())
    assert kept["status"] == "finished" and kept["steps"] == 3 and kept["last_attempt"]["status"] == "failed"


@pytest.mark.slow
def test_the_printed_continue_command_resumes_with_every_flag(tmp_path: Path) -> None:
    whileai = shutil.which("whileai") or str(Path(sys.executable).with_name("whileai"))
    (tmp_path / "flat.py").write_text(
        "import time\n\n\ndef flat(group):\n    time.sleep(0.3)\n    return {'factors': {}}\n"
    )
    recipe = recipe_with(tmp_path, "flat", grader={"kind": "python", "function": f"{tmp_path / 'flat.py'}:flat"})
    out = tmp_path / "interrupted"
    command = [whileai, "train", str(recipe), *SMOKE, "trainer.max_steps=4", "trainer.save_steps=2"]
    command += [f"output_dir={out}", "--skip-spread-gate"]  # a flat grader: refused without the flag
    with child_processes.spawn(command, stderr=subprocess.PIPE, text=True, cwd=tmp_path) as process:
        deadline = time.monotonic() + 600
        while not (out / "checkpoint-2").is_dir() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    line = re.search(r"Continue with: (.+)$", stderr, re.MULTILINE)
    assert line is not None and "--skip-spread-gate" in line.group(1), stderr
    resumed = child_processes.run(["bash", "-c", line.group(1)], cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    run = json.loads((out / "whileai_run.json").read_text())
    assert run["status"] == "finished" and run["steps"] == 4 and run["skip_spread_gate"] is True


@pytest.mark.slow
def test_the_gate_samples_as_training_generates(tmp_path: Path) -> None:
    # top_k=1: every completion of a prompt is the same, so no group has passes to tell apart
    result = train(RECIPE, *SMOKE, "trainer.top_k=1", f"output_dir={tmp_path / 'greedy'}")
    assert result.exit_code == 1, result.stderr
    gate = json.loads((tmp_path / "greedy" / "spread_gate.json").read_text())
    assert gate["verdict"] in ("no", "too few") and not (tmp_path / "greedy" / "grading.jsonl").exists()


@pytest.mark.slow
def test_the_gate_s_generation_config_is_the_one_trl_builds(tmp_path: Path) -> None:
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from whileai.tasks.load import _echo_digits
    from whileai.training.sample import generation_config
    from whileai.training.tiny import build_tiny_model

    task = _echo_digits(8, seed=0)
    path = str(build_tiny_model(tmp_path / "model", task.corpus, seed=0))
    for settings in (
        {},
        {"top_k": 3, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.2, "temperature": 0.7},
        {"generation_kwargs": {"no_repeat_ngram_size": 2, "top_k": 5}, "max_completion_length": 7},
    ):
        args = GRPOConfig(
            output_dir=str(tmp_path / "out"), num_generations=2, per_device_train_batch_size=2, use_cpu=True,
            report_to="none", **settings,
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=path,
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            args=args,
            train_dataset=datasets.Dataset.from_list(task.rows),
            processing_class=AutoTokenizer.from_pretrained(path),
        )
        ours = generation_config(args, AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
        assert ours.to_dict() == trainer.generation_config.to_dict(), settings


@pytest.mark.slow
def test_a_grader_s_system_exit_is_a_counted_fallback(tmp_path: Path) -> None:
    (tmp_path / "bye.py").write_text("import sys\n\n\ndef bye(group):\n    sys.exit(3)\n")
    grader = {"kind": "python", "function": f"{tmp_path / 'bye.py'}:bye"}
    recipe = recipe_with(tmp_path, "bye", grader=grader, grading={"mode": "advantage", "timeout_s": None})
    out = tmp_path / "bye"
    refused = train(recipe, *SMOKE, f"output_dir={out}")
    assert refused.exit_code == 4 and "SystemExit" in refused.stderr, refused.stderr
    result = train(recipe, *SMOKE, f"output_dir={tmp_path / 'anyway'}", "--skip-spread-gate")
    assert result.exit_code == 0, result.stderr
    run = json.loads((tmp_path / "anyway" / "whileai_run.json").read_text())
    figures = run["grader"]
    assert set(figures["fallbacks"]) == {"SystemExit"} and figures["failed"] == figures["grader_calls"] > 0
    # Every group fell back: the run's last line, its record and its report say it trained as plain GRPO.
    plain = f"mostly as plain GRPO: {figures['failed']} of {figures['sent']} groups sent to the grader fell back"
    assert plain in result.stdout and "To stop such a run at a checkpoint instead: spread.watch.on_fail=stop" in (
        result.stdout
    )
    assert run["trained_as"].startswith(plain)
    report = runner.invoke(app, ["report", str(tmp_path / "anyway")], env={"COLUMNS": "200"})
    assert report.exit_code == 0 and plain in report.stdout, report.stdout


@pytest.mark.slow
def test_skip_spread_gate_trains_past_a_judge_that_answers_nothing(tmp_path: Path, judge_tools) -> None:
    judge = {"base_url": judge_tools.closed_port_url(), "model": "m", "max_retries": 0, "cache_dir": None}
    recipe = recipe_with(tmp_path, "down", grader={"kind": "judge", "judge": judge})
    refused = train(recipe, *SMOKE, f"output_dir={tmp_path / 'refused'}")
    assert refused.exit_code == 4 and "spread: broken. The grader is unavailable" in refused.stderr, refused.stderr
    assert "not training (--skip-spread-gate trains anyway" in refused.stdout
    assert json.loads((tmp_path / "refused" / "spread_gate.json").read_text())["verdict"] == "broken"
    out = tmp_path / "anyway"
    result = train(recipe, *SMOKE, f"output_dir={out}", "--skip-spread-gate")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("training anyway (--skip-spread-gate, recorded in the run)") == 1
    assert json.loads((out / "spread_gate.json").read_text())["verdict"] == "broken"
    run = json.loads((out / "whileai_run.json").read_text())
    assert run["skip_spread_gate"] is True and run["spread"]["verdict"] == "broken" and run["steps"] == 2
    assert run["trained_as"].startswith("mostly as plain GRPO") and "unreachable" in run["trained_as"]
    report = runner.invoke(app, ["report", str(out)], env={"COLUMNS": "200"})
    assert "spread gate broken, trained anyway (--skip-spread-gate)" in " ".join(report.stdout.split())


SANDBOX_DOWN = """
import sys
from pathlib import Path

calls = Path(__file__).with_name("calls")  # each call runs in a process of its own: counted on disk


def sandbox_down(prompts, completions, **kwargs):
    with calls.open("a") as counted:
        counted.write("x")
    if len(calls.read_text()) == 4:  # the sandbox's client gives up on the process
        sys.exit(3)
    return [None] * len(completions)
"""


@pytest.mark.slow
def test_a_verifier_that_scores_nothing_or_exits_trains_on_with_zero_advantage(tmp_path: Path, caplog) -> None:
    (tmp_path / "down.py").write_text(SANDBOX_DOWN)
    recipe = recipe_with(tmp_path, "down", verifier={"function": f"{tmp_path / 'down.py'}:sandbox_down"})
    out = tmp_path / "down"
    result = train(recipe, *SMOKE, "spread.sample.prompts=2", f"output_dir={out}", "--skip-spread-gate")
    assert result.exit_code == 0, result.stderr
    said = caplog.text  # the verifier's log lines (stderr, outside pytest)
    assert "the verifier scored none of a batch's 32 completions" in said
    assert "sandbox_down (" in said and "it raised SystemExit: 3" in said
    run = json.loads((out / "whileai_run.json").read_text())
    assert run["status"] == "finished" and run["steps"] == 2 and run["grader"]["unscorable"] == 64
    # Two such batches are fewer than stop a run; the closing line and the record say what the verifier left unscored.
    assert "trained 2 steps, 64 of 64 completions unscored by the verifier (32 failed); the run is in" in result.stdout
    assert run["verifier"] == {"failures": 32, "kinds": {"SystemExit": 32}, "first": run["verifier"]["first"],
                               "unscored": 64, "completions": 64}  # fmt: skip
    assert "\u2013" in result.stderr  # the step's reward, which TRL logs as no number, shown as a dash


def test_a_checkpoint_cut_short_by_ctrl_c_is_not_resumed_from(tmp_path: Path) -> None:
    from whileai.training.folder import last_checkpoint

    for step, whole in ((1, True), (2, False)):  # Ctrl-C while checkpoint-2 was being written
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x")
        if whole:
            (folder / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path) == (tmp_path / "checkpoint-1", 1)
