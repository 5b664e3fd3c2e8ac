"""The CPU twin of the agent recipe: multi-turn tool calls through TRL's environment_factory, trained with GAR.

``whileai train recipes/tiny_cpu_agent_gar.yaml`` for two steps (a tiny model warm-started on the seeded agent's
conversations, then GRPO on the support scenarios with the scripted rule). Checked from outside: TRL's own logged
advantages equal equation 3 group by group (an environment that also owned a reward would make them A + A'), the
grader read the tools' answers, and a trainer that adds a reward function is refused before its first step.
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
RECIPE = REPO / "recipes" / "tiny_cpu_agent_gar.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`whileai train recipes/tiny_cpu_agent_gar.yaml` as the recipe's comment shows it, from a fresh directory."""
    where = tmp_path_factory.mktemp("agent")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(where)
        result = runner.invoke(app, ["train", str(RECIPE)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return where / "runs" / "tiny_cpu_agent_gar"


@pytest.mark.slow
def test_the_agent_twin_trains_on_equation_3(agent_run: Path, trl_signal) -> None:
    told_apart = trl_signal.assert_equation_3(agent_run, size=8)
    assert told_apart > 0, "no group had passes of different quality: the test would prove nothing"
    summary = json.loads((agent_run / "whileai_run.json").read_text())
    assert summary["steps"] == 12 and summary["grader"]["failed"] == 0
    assert json.loads((agent_run / "spread_gate.json").read_text())["passed"] is True


@pytest.mark.slow
def test_the_grader_read_the_tools_answers(agent_run: Path) -> None:
    """The completions TRL logged are conversations with tool results; the grader saw them rendered as the spread
    gate renders simulated rows, and the warm start made a policy that calls tools."""
    from whileai.rows.text import completion_text

    frames = [pd.read_parquet(p) for p in sorted((agent_run / "completions").glob("*.parquet"))]
    completions = [c for frame in frames for c in frame["completion"]]
    # a call TRL parsed is a message's tool_calls (Parquet gives them back as arrays); markup it could not parse
    # stays in the agent's text, with no result
    called = [list(c) for c in completions if any(m["tool_calls"] is not None for m in c)]
    assert len(called) > len(completions) // 4
    assert all("<tool_result>" in completion_text(c) for c in called)
    warm = json.loads((agent_run / "base_model" / "warm_start.json").read_text())
    assert warm["steps"] == 300 and warm["final_loss"] < 2.0


@pytest.mark.slow
def test_the_report_reads_the_agent_run(agent_run: Path) -> None:
    """`whileai report runs/tiny_cpu_agent_gar`, as the recipe's comment shows it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(agent_run.parents[1])
        result = runner.invoke(app, ["report", "runs/tiny_cpu_agent_gar", "--json"])
    assert result.exit_code == 0, result.stderr
    run = json.loads(result.stdout)["reports"][0]
    assert len(run["pass_rates"]) == 12 and run["grader"]["groups"] == 24


@pytest.mark.slow
def test_a_trainer_that_adds_a_reward_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL adds an environment's get_reward as a second reward function of weight 1 (A + A' instead of A'). With
    such an environment in place of whileai's, `whileai train` checks the built trainer and stops before step 1."""
    from whileai.simulations import environment

    monkeypatch.setattr(environment, "SupportEnvironment", environment.RewardedSupportEnvironment)
    out = tmp_path / "refused"
    args = ["train", str(RECIPE), "model.warm_start.steps=0", f"output_dir={out}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.stderr
    assert "would not train on equation 3" in result.stderr and "2 reward functions" in result.stderr
    assert "RewardedSupportEnvironment" in result.stderr
    assert not list(out.glob("checkpoint-*")) and not list(out.glob("completions/*.parquet"))


@pytest.mark.slow
def test_the_binary_agent_arm_and_the_report_of_both(agent_run: Path, trl_signal) -> None:
    """`whileai train recipes/tiny_cpu_agent_binary.yaml` and `whileai report runs/tiny_cpu_agent_binary
    runs/tiny_cpu_agent_gar`, as that recipe's comment shows them, in the folder the GAR arm ran in."""
    where = agent_run.parents[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(where)
        trained = runner.invoke(app, ["train", str(REPO / "recipes" / "tiny_cpu_agent_binary.yaml")])
        assert trained.exit_code == 0, trained.stderr
        shown = runner.invoke(app, ["report", "runs/tiny_cpu_agent_binary", "runs/tiny_cpu_agent_gar", "--json"])
    assert shown.exit_code == 0, shown.stderr
    binary = where / "runs" / "tiny_cpu_agent_binary"
    assert not (binary / "grading.jsonl").exists()
    # the binary arm trains on plain Dr. GRPO over the support verifier: r - mean(group), group by group
    groups = trl_signal.advantages_by_group(binary, size=8)
    assert len(groups) == 24
    for rewards, advantages in groups:
        mean = sum(rewards) / len(rewards)
        assert advantages == pytest.approx([r - mean for r in rewards], abs=1e-6)
    # the same seed gives both arms the same warm-started base model: the second arm copies the first's, warm
    # started once (the cache is this test session's own, tests/conftest.py)
    assert "whileai: the tiny model from " in trained.stderr and "warm start: 300" not in trained.stderr
    for name in ("warm_start.json", "model.safetensors", "tokenizer.json"):
        assert (binary / "base_model" / name).read_bytes() == (agent_run / "base_model" / name).read_bytes(), name
    comparison = json.loads(shown.stdout)["comparison"]
    assert comparison["paired"] and comparison["low"] <= comparison["difference"] <= comparison["high"]
