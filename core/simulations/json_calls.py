"""Tool calls written as bare JSON in a message: how small instruct models call tools when their chat template's form
is not what they write.

A model given tools is expected to answer in its chat template's form (Qwen2.5's ``<tool_call>{...}</tool_call>``),
which the server (vLLM's tool parser) or the tokenizer (TRL's ``parse_response``) turns into structured tool calls.
Qwen2.5-Coder-0.5B-Instruct writes ``{"name": "refund_order", "arguments": {...}}`` in the message content instead,
sometimes in a ```json fence. :func:`json_tool_calls` reads those: the JSON objects of a text whose ``name`` is one
of the task's tools and whose ``arguments`` is an object (or a JSON string of one). A call whose JSON does not parse
(``"amount": $74.95``) stays text: a malformed call is the model's failure, not the reader's to mend.

Used by training (``whileai.integrations.tool_calls``, ``model.tool_calls: json``) and by the model agent of
``whileai simulate`` (``tool_calls="json"``), so both read a model's calls the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from typing import Any

__all__ = ["json_tool_calls"]

_FENCE = re.compile(r"```(?:json)?")


def _objects(text: str) -> Iterator[Any]:
    """Every JSON value that starts at a ``{`` of ``text`` and parses, left to right, not overlapping."""
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        yield value
        position = text.find("{", end)


def _as_call(value: Any, names: Collection[str]) -> dict[str, Any] | None:
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return {"type": "function", "function": {"name": value["name"], "arguments": arguments}}


def json_tool_calls(text: str, names: Collection[str]) -> list[dict[str, Any]]:
    """The tool calls written as bare JSON objects in ``text``, in TRL's form.

    Args:
        text: the message content.
        names: the task's tool names; an object naming anything else is not a call.

    Returns:
        ``[{"type": "function", "function": {"name", "arguments"}}, ...]``, empty when there is none.

    Example:
        >>> json_tool_calls('```json {"name": "lookup_order", "arguments": {"order_id": "A"}} ```', ["lookup_order"])
        [{'type': 'function', 'function': {'name': 'lookup_order', 'arguments': {'order_id': 'A'}}}]
        >>> json_tool_calls('{"name": "refund_order", "arguments": {"amount": $5}}', ["refund_order"])
        []
    """
    calls = (_as_call(value, names) for value in _objects(_FENCE.sub(" ", text)))
    return [call for call in calls if call is not None]
