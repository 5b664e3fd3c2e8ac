"""Tool calls a chat template does not parse: a real instruct model's bare JSON call.

TRL runs a tool only when ``tokenizer.parse_response`` finds a tool call in the completion, which it does in the chat
template's own form (for Qwen2.5, ``<tool_call>{...}</tool_call>``). A small instruct model given tools often writes
the call as bare JSON in the message content instead: ``{"name": "refund_order", "arguments": {...}}``, sometimes
in a ```json fence. Qwen2.5-Coder-0.5B-Instruct did so in 31 of 32 first turns on the support scenarios, and
TRL parsed none of them, so no tool ran and every rollout failed.

:func:`accept_json_tool_calls` makes the tokenizer read those too: where the template's parser finds no tool call,
the content is searched for JSON objects whose ``name`` is one of the task's tools and whose ``arguments`` is an
object (or a JSON string of one), and each becomes a tool call (``whileai.simulations.json_calls``, the reader
``whileai simulate``'s model agent uses too). TRL builds the next turn by appending the tool's
result to the completion's own tokens, so the policy is trained on what it wrote, not on a rewritten call. A call
whose JSON does not parse (``"amount": $74.95``) stays text: a malformed call is the policy's failure.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from whileai.simulations.json_calls import json_tool_calls

__all__ = ["accept_json_tool_calls", "recipe_tool_calls"]


def recipe_tool_calls(recipe: Any) -> str:
    """The recipe's ``model.tool_calls`` (``"template"`` for a recipe with no model section)."""
    return recipe.model.tool_calls if recipe.model is not None else "template"


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
