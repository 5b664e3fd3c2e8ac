"""The GPU recipe for real: a small instruct model on the multi-turn support scenarios (needs CUDA and the model).

Marked ``gpu``: left out of CI and of machines without a GPU. The judge is replaced by the scripted tool-call rule
so the test needs no second server; two steps on eight scenarios.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_refund_agent_recipe_trains_two_steps(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from whileai.cli.main import app

    recipe = yaml.safe_load((REPO / "recipes" / "refund_agent_gar.yaml").read_text())
    recipe["grader"] = {"kind": "scripted", "rule": {"measure": "matches", "pattern": "<tool_call>"}}
    recipe["simulate"]["num_scenarios"] = 8
    recipe["data"]["num_prompts"] = 8
    recipe["trainer"].update(max_steps=2, gradient_accumulation_steps=1, save_steps=2)
    recipe["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    result = CliRunner().invoke(app, ["train", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "whileai_run.json").read_text())
    assert summary["steps"] == 2 and summary["spread"]["verdict"] == "yes"
