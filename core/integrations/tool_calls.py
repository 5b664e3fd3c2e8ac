"""Tool calls a chat template does not parse: a real instruct model's bare JSON call.

TRL runs a tool only when ``tokenizer.parse_response`` finds a tool call in the completion, which it does in the chat
template's own form (for Qwen2.5, ``<tool_call>{...}</tool_call>``). A small instruct model given tools often writes
the call as bare JSON in the message content instead: ``{"name": "refund_order", "arguments": {...}}``, sometimes
in a ```json fence. Qwen2.5-Coder-0.5B-Instruct did so in 31 of 32 first turns on the support scenarios, and
TRL parsed none of them, so no tool ran and every rollout failed.

:func:`accept_json_tool_calls` makes the tokenizer read those too: where the template's parser finds no tool call,
the content is searched for JSON objects whose ``name`` is one of the task's tools and whose ``arguments`` is an
object (or a JSON string of one), and each becomes a tool call (:func:`json_tool_calls`, the reader
``whileai simulate``'s model agent uses too). TRL builds the next turn by appending the tool's
result to the completion's own tokens, so the policy is trained on what it wrote, not on a rewritten call. A call
whose JSON does not parse (``"amount": $74.95``) stays text: a malformed call is the policy's failure.

:func:`environment_tools` lists the tools TRL offers the model for an environment, in TRL's order.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Collection, Iterator
from typing import Any

__all__ = ["accept_json_tool_calls", "environment_tools", "json_tool_calls"]

_FENCE = re.compile(r"```(?:json)?")


def accept_json_tool_calls(tokenizer: Any, names: Collection[str]) -> Any:
    """Make ``tokenizer.parse_response`` also read bare JSON tool calls (see the module docstring).

    The template's parse is asked first; only a message it gives no tool call is searched, and a message with a call
    found gets an empty content, as the template's parser gives one. The tokenizer is changed in place (its
    ``parse_response`` wrapped once) and returned.
    """
    parse = tokenizer.parse_response
    if getattr(parse, "whileai_json_tool_calls", False):
        return tokenizer
    names = frozenset(names)

    def parse_response(*args: Any, **kwargs: Any) -> Any:
        parsed = parse(*args, **kwargs)
        if not isinstance(parsed, dict) or parsed.get("tool_calls"):
            return parsed
        content = parsed.get("content")
        calls = json_tool_calls(content, names) if isinstance(content, str) else []
        if not calls:
            return parsed
        return {**parsed, "content": "", "tool_calls": calls}

    parse_response.whileai_json_tool_calls = True  # type: ignore[attr-defined]
    tokenizer.parse_response = parse_response
    return tokenizer


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


def environment_tools(environment: Any) -> list[Any]:
    """The tools TRL 1.16 offers the model for an environment instance, in TRL's order: the class's public functions
    other than ``reset`` and ``get_reward``, by name (``inspect.getmembers`` on the class), bound to the instance.

    Example:
        >>> from whileai.simulations.environment import SupportEnvironment
        >>> [tool.__name__ for tool in environment_tools(SupportEnvironment())]
        ['cancel_order', 'change_address', 'list_orders', 'lookup_order', 'refund_order']
    """
    members = inspect.getmembers(type(environment), predicate=inspect.isfunction)
    return [
        getattr(environment, name)
        for name, _ in members
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]
