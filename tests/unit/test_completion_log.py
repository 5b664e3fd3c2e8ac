"""TRL's completion log of tool-calling conversations reaches Parquet whatever the tool calls' arguments (the trainer
``whileai train`` builds converts them just before it logs: tests/integration/test_trl_agent.py writes them)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from whileai.integrations.trl_trainer import json_tool_arguments
from whileai.rows.text import render_messages

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def conversation(arguments: dict) -> list[dict]:
    call = {"type": "function", "function": {"name": "list_orders", "arguments": arguments}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "list_orders", "content": '["ORD-1"]'},
        {"role": "assistant", "content": "refunded ORD-1"},
    ]


def write(completions: list, path: Path) -> None:
    # as TRL's GRPOTrainer.log writes it
    pd.DataFrame({"step": [1] * len(completions), "completion": completions}).to_parquet(path)


def test_a_batch_of_calls_without_arguments_is_written_and_renders_the_same(tmp_path: Path) -> None:
    completions = [conversation({}), conversation({})]
    with pytest.raises(Exception, match="struct"):  # what stopped a run: a struct with no fields
        write(copy.deepcopy(completions), tmp_path / "before.parquet")
    rendered = [render_messages(c) for c in completions]
    json_tool_arguments(completions)
    write(completions, tmp_path / "after.parquet")
    assert [render_messages(c) for c in completions] == rendered
    back = pd.read_parquet(tmp_path / "after.parquet")["completion"]
    assert [render_messages([dict(m) for m in c]) for c in back] == rendered


def test_mixed_tools_keep_their_own_arguments(tmp_path: Path) -> None:
    """As dicts, Parquet merged every tool's fields into one struct (a call read back with the other tool's fields
    as None); as JSON strings each call keeps its own."""
    completions = [conversation({}), conversation({"order_id": "ORD-7"})]
    json_tool_arguments(completions)
    json_tool_arguments(completions)  # a conversation logged again (TRL keeps a window) is left as it is
    write(completions, tmp_path / "mixed.parquet")
    back = pd.read_parquet(tmp_path / "mixed.parquet")["completion"]
    assert [c[0]["tool_calls"][0]["function"]["arguments"] for c in back] == ["{}", '{"order_id": "ORD-7"}']


def test_a_message_of_several_calls_read_back_renders_as_written(tmp_path: Path) -> None:
    """Parquet gives a message's tool calls back as a numpy array, whose truth is ambiguous past one element."""
    calls = [{"type": "function", "function": {"name": "list_orders", "arguments": {}}}] * 2
    completions = [[{"role": "assistant", "content": "", "tool_calls": calls}, {"role": "assistant", "content": "ok"}]]
    json_tool_arguments(completions)
    rendered = [render_messages(c) for c in completions]
    write(completions, tmp_path / "several.parquet")
    back = pd.read_parquet(tmp_path / "several.parquet")["completion"]
    assert type(back[0][0]["tool_calls"]).__module__ == "numpy"
    assert [render_messages(list(c)) for c in back] == rendered
    assert rendered[0].count("<tool_call>list_orders {}</tool_call>") == 2
