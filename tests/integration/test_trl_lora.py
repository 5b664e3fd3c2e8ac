"""``model.lora``: the offline recipe trained with LoRA adapters through TRL's ``peft_config``, for 2 steps.

TRL's advantages are still equation 3 (the adapters change what trains, not the signal), only the adapters train
(the run saves them, not the model), the gate's sampling says the initial model's pass rate, and ``whileai eval``
loads the adapters over their base model from another working directory.
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
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
runner = CliRunner()
LORA = ["model.lora.r=4", "model.lora.alpha=8", "trainer.learning_rate=0.01"]
SMOKE = ["trainer.max_steps=2", "trainer.logging_steps=1", "trainer.save_steps=2", "data.num_prompts=8"]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("lora") / "gar"
    result = runner.invoke(app, ["train", str(RECIPE), *SMOKE, *LORA, f"output_dir={out}"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out, result.stderr


@pytest.mark.slow
def test_lora_trains_adapters_on_equation_3(lora_run: tuple[Path, str], trl_signal) -> None:
    run_dir, said = lora_run
    told_apart = trl_signal.assert_equation_3(run_dir, size=8)
    assert told_apart > 0, "no group had passes of different quality: the test would prove nothing"
    final = run_dir / "final"
    adapter = json.loads((final / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8 and adapter["peft_type"] == "LORA"
    assert Path(adapter["base_model_name_or_path"]).is_absolute()  # found from any working directory
    assert not (final / "model.safetensors").exists()  # the base model stays where it was, unchanged
    assert "the initial model's pass rate" in said and "groups mixed" in said
    gate = json.loads((run_dir / "spread_gate.json").read_text())
    rate = gate["sampled_pass_rate"]
    assert rate["n"] == 32 * 8 and 0 <= rate["low"] <= rate["rate"] <= rate["high"] <= 1


@pytest.mark.slow
def test_transformers_loads_the_adapters_over_the_unchanged_base(lora_run: tuple[Path, str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    run_dir = lora_run[0]
    trained = AutoModelForCausalLM.from_pretrained(str(run_dir / "final"))  # the base, with the adapters on it
    base = AutoModelForCausalLM.from_pretrained(str(run_dir / "base_model"))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert (trained(ids).logits - base(ids).logits).abs().max() > 1e-3  # two steps moved the policy


@pytest.mark.slow
def test_eval_loads_the_adapters(lora_run: tuple[Path, str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["eval", str(lora_run[0]), "--prompts", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == "final" and data["pass_rate"]["n"] == 2 * 8
