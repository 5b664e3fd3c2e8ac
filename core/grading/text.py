"""What a grader reads: prompts and completions as text, whether TRL hands over strings or chat messages.

TRL passes standard completions as strings and conversational ones as lists of messages
(``[{"role": "assistant", "content": ..., "tool_calls": [...]}, {"role": "tool", ...}]``). A grader reads the
assistant's side of a conversation as one text, with each tool call rendered as ``<tool_call>name {args}</tool_call>``
so that a rule such as "count the tool calls" works on both forms. Nothing here tokenizes or truncates.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["completion_text", "prompt_text", "render_tool_call"]


def render_tool_call(call: Mapping[str, Any]) -> str:
    """``<tool_call>name {json arguments}</tool_call>`` for an OpenAI-style or flat tool call."""
    function = call.get("function", call)
    name = function.get("name", "?") if isinstance(function, Mapping) else "?"
    arguments = function.get("arguments", {}) if isinstance(function, Mapping) else {}
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, sort_keys=True, default=str)
    return f"<tool_call>{name} {arguments}</tool_call>"


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # multimodal parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def completion_text(completion: Any) -> str:
    """The assistant's text of a completion: a string as it is, or a conversation's assistant turns joined.

    Example:
        >>> completion_text([{"role": "assistant", "content": "", "tool_calls": [
        ...     {"function": {"name": "lookup", "arguments": {"order_id": "ORD-1"}}}]},
        ...     {"role": "tool", "content": "found"}, {"role": "assistant", "content": "done"}])
        '<tool_call>lookup {"order_id": "ORD-1"}</tool_call>\\ndone'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        parts = []
        for message in completion:
            if not isinstance(message, Mapping):
                parts.append(str(message))
                continue
            if message.get("role", "assistant") != "assistant":
                continue
            text = _content(message)
            calls = "".join(render_tool_call(c) for c in message.get("tool_calls") or [] if isinstance(c, Mapping))
            joined = text + calls if text and calls else (text or calls)
            if joined:
                parts.append(joined)
        return "\n".join(parts)
    return str(completion)


def prompt_text(prompt: Any) -> str:
    """A prompt as text: a string as it is, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if users:
            return _content(users[-1])
        return "\n".join(_content(m) for m in prompt if isinstance(m, Mapping))
    return str(prompt)
