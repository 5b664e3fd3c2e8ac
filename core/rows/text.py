"""What a grader reads: one rendering of a rollout as text, whether it comes as a string, as chat messages from TRL,
or as a conversation ``whileai simulate`` recorded.

The spread gate grades the rows ``whileai simulate`` writes and training grades the completions TRL hands the reward
function; a grader must see the same text for the same rollout in both places, or a rule that passes the gate
misjudges training (a correct refund flagged as naming an order "no tool returned", because the tool results were
left out). So there is one renderer, :func:`render_messages`, and both paths go through it:

- an assistant message: its text as ``agent: ...``, then each tool call as ``<tool_call>name {json}</tool_call>``;
- a tool message: ``<tool_result>...</tool_result>`` (TRL puts the tool's return value there as a string);
- a user message: ``customer: ...``.

One event per line. JSON is written by :func:`dump_json` (sorted keys, UTF-8), so a tool's answer reads the same
whether the environment wrote it for TRL or ``simulate`` recorded it. A completion that is already a string is read
as it is. Nothing here tokenizes or truncates.

The reward function renders every completion of a training batch that goes to a grader, so the common shapes (plain
``dict`` messages, ``str`` contents, ``dict`` arguments) take a path without abstract-class checks and with one JSON
encoder built once; anything else goes the general way to the same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["completion_text", "dump_json", "prompt_text", "render_messages", "render_tool_call"]


def _encoder() -> Callable[[Any, int], Any] | None:
    """``json.dumps(sort_keys=True, ensure_ascii=False, default=str)``'s C encoder, built once instead of per call (the
    build is most of the cost of encoding a tool call's few arguments). None where json has no C speedups."""
    make = getattr(json.encoder, "c_make_encoder", None)
    string = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or string is None:
        return None
    # markers=None: no check for a circular structure, which JSON-parsed tool arguments cannot hold (one would end in
    # a RecursionError rather than json's ValueError). Separators and allow_nan are json.dumps's defaults.
    return make(None, str, string, None, ": ", ", ", True, False, True)


_ENCODE = _encoder()


def dump_json(value: Any) -> str:
    """JSON as every rendering of whileai writes it: sorted keys, non-ASCII kept as it is.

    Example:
        >>> dump_json({"b": 1, "a": "café"})
        '{"a": "café", "b": 1}'
    """
    if _ENCODE is None:  # pragma: no cover - CPython always has the C encoder
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return "".join(_ENCODE(value, 0))


def _arguments(arguments: Any) -> str:
    """A tool call's arguments as canonical JSON; a string that is not JSON stays as it is."""
    if type(arguments) is dict:
        return dump_json(arguments)
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return dump_json(arguments)


def render_tool_call(call: Mapping[str, Any]) -> str:
    """``<tool_call>name {json arguments}</tool_call>`` for an OpenAI-style or flat tool call.

    Example:
        >>> render_tool_call({"type": "function", "function": {"name": "lookup", "arguments": '{"id": 1}'}})
        '<tool_call>lookup {"id": 1}</tool_call>'
    """
    function = call.get("function", call)
    if type(function) is dict or isinstance(function, Mapping):
        name, arguments = function.get("name", "?"), function.get("arguments", {})
    else:
        name, arguments = "?", {}
    return f"<tool_call>{name} {_arguments(arguments)}</tool_call>"


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if type(content) is str:
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # multimodal parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


# Who says what, in the transcript's words.
_SPEAKERS = {"assistant": "agent", "user": "customer"}


def render_messages(messages: Sequence[Any]) -> str:
    """A conversation as one text, one event per line (see the module docstring).

    System messages are left out (they are the task's instructions, not the rollout); a message that is not a dict
    is written as its string.

    Example:
        >>> print(render_messages([
        ...     {"role": "assistant", "content": "", "tool_calls": [
        ...         {"function": {"name": "lookup_order", "arguments": {"order_id": "ORD-1"}}}]},
        ...     {"role": "tool", "name": "lookup_order", "content": '{"status": "delivered"}'},
        ...     {"role": "assistant", "content": "Refunded."}]))
        <tool_call>lookup_order {"order_id": "ORD-1"}</tool_call>
        <tool_result>{"status": "delivered"}</tool_result>
        agent: Refunded.
    """
    lines: list[str] = []
    add = lines.append
    for message in messages:
        if type(message) is not dict and not isinstance(message, Mapping):
            add(str(message))
            continue
        role = message.get("role", "assistant")
        if role == "system":
            continue
        text = message.get("content")
        if type(text) is not str:
            text = _content(message)
        if role == "tool":
            add(f"<tool_result>{text}</tool_result>")
            continue
        if text:
            add(f"{_SPEAKERS.get(role, role)}: {text}")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, (str, bytes)):  # a list, or numpy's array out of a parquet file
            for call in calls:
                function = call.get("function", call) if type(call) is dict else None
                if type(function) is dict and type(arguments := function.get("arguments", {})) is dict and _ENCODE:
                    # render_tool_call inlined for the common shape: a dict call, a dict function, dict arguments
                    add(f"<tool_call>{function.get('name', '?')} {''.join(_ENCODE(arguments, 0))}</tool_call>")
                elif type(call) is dict or isinstance(call, Mapping):
                    add(render_tool_call(call))
    return "\n".join(lines)


def completion_text(completion: Any) -> str:
    """What a grader reads of a completion: a string as it is, a conversation through :func:`render_messages`.

    Example:
        >>> completion_text([{"role": "assistant", "content": "", "tool_calls": [
        ...     {"function": {"name": "lookup", "arguments": {"order_id": "ORD-1"}}}]},
        ...     {"role": "tool", "content": "found"}, {"role": "assistant", "content": "done"}])
        '<tool_call>lookup {"order_id": "ORD-1"}</tool_call>\\n<tool_result>found</tool_result>\\nagent: done'
    """
    kind = type(completion)
    if kind is str:
        return completion
    if kind is list:  # TRL's conversational completion
        return render_messages(completion)
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return render_messages([completion])
    if isinstance(completion, Sequence):
        return render_messages(completion)
    if hasattr(completion, "tolist"):  # a conversation read back from a Parquet log (a numpy array of dicts)
        return completion_text(completion.tolist())
    return str(completion)


def prompt_text(prompt: Any) -> str:
    """A prompt as text: a string as it is, or the last user message of a conversation (the task as asked)."""
    if type(prompt) is str:
        return prompt
    if type(prompt) is list:  # TRL's conversational prompt: the last user message, found from the end
        for message in reversed(prompt):
            if type(message) is not dict:
                break  # anything else: the general path below
            if message.get("role") == "user":
                return _content(message)
        else:
            return "\n".join(_content(m) for m in prompt)
    if isinstance(prompt, str):
        return prompt
    if hasattr(prompt, "tolist") and not isinstance(prompt, Sequence):
        prompt = prompt.tolist()
    if isinstance(prompt, Sequence):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if users:
            return _content(users[-1])
        return "\n".join(_content(m) for m in prompt if isinstance(m, Mapping))
    return str(prompt)
