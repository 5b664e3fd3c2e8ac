"""A resume takes the spread gate's verdict from the run folder only while the recipe gates the same way."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from whileai.config import load_recipe
from whileai.training.folder import recorded_gate

RECIPE = Path(__file__).parents[2] / "recipes" / "tiny_cpu_gar.yaml"


def _run_folder(tmp_path: Path, source: str = "simulate") -> tuple[Path, dict]:
    out = tmp_path / "run"
    out.mkdir(parents=True)
    recipe = load_recipe(RECIPE).recipe.model_dump(mode="json")
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    (out / "spread_gate.json").write_text(json.dumps({"source": source, "verdict": "yes", "spread": {}}))
    return out, recipe


def test_the_same_recipe_keeps_the_recorded_verdict(tmp_path: Path) -> None:
    out, recipe = _run_folder(tmp_path)
    recipe["trainer"]["max_steps"] = 99  # training longer does not change what the gate read
    gate, why = recorded_gate(out, recipe)
    assert gate is not None and gate["verdict"] == "yes" and why == ""


def test_a_changed_gate_section_runs_the_gate_again(tmp_path: Path) -> None:
    out, recipe = _run_folder(tmp_path)
    recipe["spread"]["seed"] = 12345
    recipe["grader"]["kind"] = "changed"
    gate, why = recorded_gate(out, recipe)
    assert gate is None and why == "the recipe's grader, spread changed since the verdict"


def test_a_gate_on_sampled_completions_also_reads_the_generation_settings(tmp_path: Path) -> None:
    out, recipe = _run_folder(tmp_path, source="sample")
    recipe["trainer"]["temperature"] = 0.25
    assert recorded_gate(out, recipe) == (None, "the recipe's trainer.temperature changed since the verdict")
    out, recipe = _run_folder(tmp_path / "other", source="simulate")
    recipe["trainer"]["temperature"] = 0.25
    assert recorded_gate(out, recipe)[0] is not None


def test_no_or_unreadable_verdict_runs_the_gate(tmp_path: Path) -> None:
    out, recipe = _run_folder(tmp_path)
    (out / "spread_gate.json").write_text('{"verdict": "yes"')  # cut short
    assert recorded_gate(out, recipe) == (None, "the run folder keeps no verdict")
    (out / "spread_gate.json").unlink()
    assert recorded_gate(out, recipe) == (None, "the run folder keeps no verdict")
