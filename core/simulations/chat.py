"""One chat completion at a time, with tools, over an OpenAI-compatible endpoint: the model agent's and the simulated
customer's HTTP client.

:class:`ChatClient` asks :class:`whileai.http.client.EndpointClient` plain chat completions through its public
interface, and so keeps everything that client does for a call: one connection pool on one background event loop
(so ``chat`` is a plain synchronous method that any number of threads may call at once), the wall-clock timeout,
retries with exponential backoff and jitter on connection errors, timeouts, 408/409/429 (honouring ``Retry-After``),
5xx and a 200 that is no chat completion (an empty or cut body, no message), the API key read from the environment
variable the settings name and masked in every message that leaves it, and the ``EndpointStats`` counters. What a
chat call is: the request carries the tools (OpenAI function-calling format) and a seed, the answer is the assistant
message as the server sent it (``content`` and ``tool_calls``) rather than a checked verdict, and nothing is cached
(two samples of one prompt must be able to differ).

A call that gets no usable answer after its retries raises :class:`EndpointUnavailable` (exit code 4, like an
unreachable judge). From then on the client fails every call at once with the same message: a simulation stops at
its first failure, and the scenarios still queued on other threads should not each wait out their own retries.
``close()`` clears that state.

:func:`endpoint_config` turns the keyword settings of ``model_agent`` and ``customer_model`` into checked
:class:`~whileai.http.endpoint.EndpointSettings` (the settings the judge's config extends, so an endpoint is
described the same way everywhere).

What this module does not do: turn a transcript into messages or an answer into an action (``model_agent``,
``customer``), or anything of the judge (it does not import ``whileai.judge``). Importing it does not import
``aiohttp``: the HTTP client is built on the first call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from whileai.errors import BadInput, EndpointUnavailable
from whileai.http.client import EndpointClient
from whileai.http.endpoint import Call, CallError, EndpointSettings, EndpointStats, first_choice
from whileai.http.secrets import masked_url, read_api_key

__all__ = ["ChatAnswer", "ChatClient", "EndpointUnavailable", "ServedModel", "endpoint_config", "request_seed"]


@dataclass(frozen=True)
class ChatAnswer:
    """One chat completion's first choice.

    Attributes:
        message: the assistant message as the server sent it: ``content`` (str or None) and, when the model called
            tools, ``tool_calls`` (``[{"id", "type": "function", "function": {"name", "arguments"}}]``).
        finish_reason: ``"stop"``, ``"tool_calls"``, ``"length"``, ... or None when the server gave none.
        usage: the server's token counts (``prompt_tokens``, ``completion_tokens``), empty when it gave none.
    """

    message: Mapping[str, Any]
    finish_reason: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)


def request_seed(*parts: object) -> int:
    """A request's ``seed`` from any parts (a rollout's seed, a step number): a stable non-negative 31-bit integer.

    Example:
        >>> request_seed("0:refund-17:3", 2) == request_seed("0:refund-17:3", 2)
        True
    """
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def endpoint_config(base_url: str, model: str, *, what: str, **settings: Any) -> EndpointSettings:
    """Checked :class:`~whileai.http.endpoint.EndpointSettings` for a policy or customer endpoint: ``settings`` are any
    of its fields (``temperature``, ``max_tokens``, ``timeout_s``, ``max_retries``, ...), the others keep their one
    default. Answers come whole (``stream: false``): a tool call is read from the whole message.

    Raises:
        BadInput: an unknown or out-of-range setting, or ``api_key_env`` names a variable that is not set (the
            message names the variable and the field, never a value).
    """
    from pydantic import ValidationError

    if "stream" in settings:
        raise BadInput(f"{what}: stream is not a setting here: a tool call is read from the whole answer")
    if "extra_body" in settings:
        settings["extra_body"] = dict(settings["extra_body"] or {})
    if isinstance(settings.get("temperature"), int) and not isinstance(settings["temperature"], bool):
        settings["temperature"] = float(settings["temperature"])
    if isinstance(settings.get("timeout_s"), int) and not isinstance(settings["timeout_s"], bool):
        settings["timeout_s"] = float(settings["timeout_s"])
    try:
        config = EndpointSettings(base_url=base_url, model=model, stream=False, **settings)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or what}: {e['msg'].removeprefix('Value error, ')}" for e in error.errors()
        )
        raise BadInput(f"{what}: {problems}") from None
    read_api_key(config.api_key_env, field=f"{what}: api_key_env")  # a variable named but not set fails here
    return config


class ChatClient:
    """Chat completions with tools against ``config.base_url``; thread-safe, one connection pool.

    Args:
        config: the endpoint and its settings (:func:`endpoint_config` builds them).
        role: what the endpoint plays, for messages: ``"policy"``, ``"customer"``.

    Raises:
        BadInput: ``config.api_key_env`` names a variable that is not set.
    """

    def __init__(self, config: EndpointSettings, *, role: str = "model") -> None:
        self.config = config
        self.role = role
        self.endpoint = EndpointClient(config, EndpointStats(), name=role)
        self._failure: str | None = None

    def __repr__(self) -> str:
        shown = masked_url(self.config.base_url)
        return f"ChatClient(role={self.role!r}, base_url={shown!r}, model={self.config.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a ChatClient holds a connection pool and cannot be pickled; build one in each process")

    @property
    def stats(self) -> EndpointStats:
        """Calls, retries, tokens in and out, latencies."""
        return self.endpoint.stats

    def close(self) -> None:
        """Stop the loop and the connection pool, and forget an earlier failure; a later call starts afresh."""
        self.endpoint.close()
        self._failure = None

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        seed: int | None = None,
    ) -> ChatAnswer:
        """POST one chat completion and return its first choice.

        Args:
            messages: the chat messages, OpenAI format (``system``, ``user``, ``assistant`` with ``tool_calls``,
                ``tool`` with ``tool_call_id``).
            tools: the tools on offer, ``[{"type": "function", "function": {...}}]``; none sends no ``tools`` field.
            seed: the request's ``seed`` (servers that sample deterministically per seed, such as vLLM, repeat
                themselves); None sends none.

        Raises:
            EndpointUnavailable: no usable answer after the retries, or an earlier call of this client failed so.
        """
        if self._failure is not None:
            raise EndpointUnavailable(self._failure)
        fields: dict[str, Any] = {}
        if tools:
            fields["tools"] = [dict(tool) for tool in tools]
        if seed is not None:
            fields["seed"] = seed
        request = self.config.chat_request([dict(message) for message in messages], **fields)
        outcome = self.endpoint.run([Call(body=lambda: request, read=_read_answer, name="chat")])[0]
        if outcome.error is None:
            return outcome.answer
        error = outcome.error
        shown = self.endpoint.shown(str(error), 600)  # an error's text may quote what the URL carried
        message = (
            f"{self.role} at {masked_url(self.config.base_url)} (model {self.config.model}) gave no answer: {shown}"
        )
        if isinstance(error, CallError) and error.kind == "http 400" and tools:
            message += (
                "; if the server refuses tools, serve the model with tool calling on "
                "(vLLM: --enable-auto-tool-choice --tool-call-parser <parser>)"
            )
        self._failure = message
        raise EndpointUnavailable(message)


def _read_answer(response: dict[str, Any]) -> ChatAnswer:
    """A response's first choice; one without a message is retried, like a dropped connection."""
    choice = first_choice(response)
    finish = choice.get("finish_reason")
    usage = response.get("usage")
    return ChatAnswer(
        message=choice["message"],
        finish_reason=finish if isinstance(finish, str) else None,
        usage=usage if isinstance(usage, dict) else {},
    )


class ServedModel:
    """What a model served for the simulator (the agent, the customer) shows of its ``ChatClient``: a repr with the
    key-free URL, the client's ``EndpointStats``, and ``close`` (also on leaving a ``with`` block)."""

    client: ChatClient
    builder = "model"  # the function that makes one, which the repr names

    def __repr__(self) -> str:
        config = self.client.config
        return f"{self.builder}(base_url={masked_url(config.base_url)!r}, model={config.model!r})"

    @property
    def stats(self) -> EndpointStats:
        """The client's ``EndpointStats``: calls, retries, tokens in and out, latencies."""
        return self.client.stats

    def close(self) -> None:
        """Close the connection pool (a later call opens a new one)."""
        self.client.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
