"""``model.tool_calls: json``: a bare JSON tool call, as a real small instruct model writes it, is read by TRL's own
``parse_response`` on the tokenizer of the trainer ``whileai train`` builds; ``template`` leaves it text.

The completions are the forms Qwen2.5-Coder-0.5B-Instruct wrote on the support scenarios
(``benchmarks/tool_call_forms.py``): bare, in a ```json fence, with a malformed value, and the template's own form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from whileai.grading.trl import binary_reward
from whileai.integrations.trl_trainer import grpo_trainer
from whileai.simulations.environment import (
    SupportEnvironment,
    environment_conversation,
    environment_rows,
    environment_tools,
)

BARE = '{"name": "lookup_order", "arguments": {\n  "order_id": "ORD-1042"\n}}'
FENCED = '```json\n{"name": "cancel_order", "arguments": {"order_id": "ORD-1042"}}\n```'
MALFORMED = '{"name": "refund_order", "arguments": {"order_id": "ORD-1042", "amount": $74.95}}'
UNKNOWN = '{"name": "delete_everything", "arguments": {}}'
TEMPLATE = '<tool_call>\n{"name": "list_orders", "arguments": {}}\n</tool_call>'


def _trainer(tmp_path: Path, tool_calls: str) -> Any:
    from trl import GRPOConfig

    from whileai.simulations.agents import seeded_agent
    from whileai.simulations.scenarios import load_scenarios
    from whileai.training.tiny import build_tiny_agent_model

    scenarios = load_scenarios("builtin:actions", n=4, seed=0)
    tools = environment_tools(SupportEnvironment(scenarios))
    conversations = [environment_conversation(s, seeded_agent(seed=0), seed=s.scenario_id)[0] for s in scenarios]
    model = build_tiny_agent_model(tmp_path / "model", conversations, tools)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), num_generations=2, per_device_train_batch_size=2, max_steps=1,
        max_completion_length=64, report_to="none", use_cpu=True,
    )  # fmt: skip
    return grpo_trainer(
        model=str(model), reward=binary_reward(lambda p, c, **k: [0.0] * len(c), 2), args=args,
        train_rows=environment_rows(scenarios), eval_rows=[], processing_class=None,
        environment_factory=lambda: SupportEnvironment(scenarios), callbacks=[],
        where="test", tool_calls=tool_calls,
    )  # fmt: skip


def _parsed(trainer: Any, text: str) -> dict[str, Any]:
    """What TRL's decoding does with a completion: ``parse_response`` on the trainer's tokenizer, after the prompt."""
    from trl.chat_template_utils import parse_response

    tokenizer = trainer._tokenizer
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        add_generation_prompt=True,
        return_dict=True,
    )["input_ids"]
    ids = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    return parse_response(tokenizer, ids, prefix=list(prompt))


def _calls(parsed: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.get("tool_calls") or []]


@pytest.mark.slow
def test_json_reads_bare_and_fenced_calls_through_trls_parser(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "json")
    assert _calls(_parsed(trainer, BARE)) == [("lookup_order", {"order_id": "ORD-1042"})]
    assert _parsed(trainer, BARE)["content"] == ""
    assert _calls(_parsed(trainer, "I will cancel it.\n" + FENCED)) == [("cancel_order", {"order_id": "ORD-1042"})]
    assert _calls(_parsed(trainer, TEMPLATE)) == [("list_orders", {})]  # the template's own form, as before
    assert _calls(_parsed(trainer, MALFORMED)) == []  # a malformed call is the policy's failure
    assert _calls(_parsed(trainer, UNKNOWN)) == []  # no such tool
    assert _parsed(trainer, MALFORMED)["content"].startswith('{"name": "refund_order"')


@pytest.mark.slow
def test_template_leaves_a_bare_call_as_text(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "template")
    assert _calls(_parsed(trainer, BARE)) == []
    assert _calls(_parsed(trainer, TEMPLATE)) == [("list_orders", {})]


def test_the_recipe_field_is_checked() -> None:
    from pydantic import ValidationError

    from whileai.config.schema import ModelSection

    assert ModelSection(name_or_path="m").tool_calls == "template"
    with pytest.raises(ValidationError, match="'template' or 'json'"):
        ModelSection(name_or_path="m", tool_calls="xml")


def test_the_plan_says_which_tool_calls_run() -> None:
    from typer.testing import CliRunner

    from whileai.cli.main import app

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "real_cpu_agent_gar.yaml"
    hub = "model.name_or_path=Qwen/Qwen2.5-Coder-0.5B-Instruct"  # the converted folder is not made here
    shown = CliRunner().invoke(app, ["train", str(recipe), hub, "--dry-run"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.stderr
    assert "tool calls in the chat template's form or as bare JSON" in shown.stdout + shown.stderr
    plain = CliRunner().invoke(app, ["train", str(recipe), hub, "--dry-run", "model.tool_calls=template"])
    assert "bare JSON" not in plain.stdout + plain.stderr


@pytest.mark.slow
def test_the_forms_benchmark_counts_what_trls_parser_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``benchmarks/tool_call_forms.py`` as its docstring runs it, on a tiny chat model: it writes its table and
    every completion, and its counts agree with the completions it wrote (json parses at least what template does)."""
    import importlib.util
    import json
    import sys

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("tool_call_forms", repo / "benchmarks" / "tool_call_forms.py")
    forms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(forms)
    model = _trainer(tmp_path, "template").model.name_or_path
    out, answers = tmp_path / "forms.md", tmp_path / "forms.json"
    argv = ["tool_call_forms.py", "--model", model, "--scenarios", "2", "--samples", "2", "--max-new-tokens", "24"]
    for _ in range(2):  # a second run replaces the model's row
        monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), "--json", str(answers)])
        forms.main()
    completions = json.loads(answers.read_text())["model"]
    assert len(completions) == 4
    assert all(c["json"] >= c["template"] for c in completions)
    assert out.read_text().count("| model | 4 |") == 1, out.read_text()
    known = [{"named": True, "template": False, "json": True, "form": "bare JSON", "tokens": 10}]
    assert forms.row("m", known, 60) == "| m | 1 | 1/1 (100%) | 0/1 (0%) | 1/1 (100%) | 0 | 0 | 1 | 0 | 10 | 1.0 |\n"
