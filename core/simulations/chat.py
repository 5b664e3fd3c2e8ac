"""One chat completion at a time, with tools, over an OpenAI-compatible endpoint: the model agent's and the simulated
customer's HTTP client.

:class:`ChatClient` is the judge's :class:`~whileai.judge.client.JudgeClient` asked a different question. It keeps
everything the judge client does for a call: one connection pool on one background event loop (so ``chat`` is a
plain synchronous method that any number of threads may call at once), the wall-clock timeout, retries with
exponential backoff and jitter on connection errors, timeouts, 408/409/429 (honouring ``Retry-After``), 5xx and a 200
that is no chat completion (an empty or cut body, no message), the API key read from the environment variable the
config names and masked in every message that leaves it, and the ``JudgeStats`` counters. What it changes: the
request carries the tools (OpenAI function-calling format) and a seed, the answer is the assistant message as the
server sent it (``content`` and ``tool_calls``) rather than a checked JSON verdict, and nothing is cached (two samples
of one prompt must be able to differ).

A call that gets no usable answer after its retries raises :class:`EndpointUnavailable` (exit code 4, like an
unreachable judge). From then on the client fails every call at once with the same message: a simulation stops at
its first failure, and the scenarios still queued on other threads should not each wait out their own retries.
``close()`` clears that state.

:func:`endpoint_config` turns the keyword settings of ``model_agent`` and ``customer_model`` into a checked
``JudgeConfig`` (the judge's own settings model, so an endpoint is described the same way everywhere).

What this module does not do: turn a transcript into messages or an answer into an action (``model_agent``,
``customer``). Importing it does not import ``openai``: the HTTP client is built on the first call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from whileai.errors import BadInput, EndpointUnavailable
from whileai.judge.client import CallSpec, JudgeCallError, JudgeClient, first_choice
from whileai.judge.config import JudgeConfig

__all__ = ["ChatAnswer", "ChatClient", "EndpointUnavailable", "endpoint_config", "request_seed"]


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


@dataclass
class _ChatSpec(CallSpec):
    """A judge call spec that also carries the tools and the seed of the request."""

    tools: tuple[Mapping[str, Any], ...] = ()
    seed: int | None = None


def _no_reader(text: str | None) -> Any:  # pragma: no cover - ChatClient reads the whole response itself
    return text


def request_seed(*parts: object) -> int:
    """A request's ``seed`` from any parts (a rollout's seed, a step number): a stable non-negative 31-bit integer.

    Example:
        >>> request_seed("0:refund-17:3", 2) == request_seed("0:refund-17:3", 2)
        True
    """
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def endpoint_config(
    base_url: str,
    model: str,
    *,
    api_key_env: str | None,
    temperature: float,
    max_tokens: int,
    extra_body: Mapping[str, Any] | None,
    timeout_s: float,
    max_retries: int,
    concurrency: int,
    what: str,
) -> JudgeConfig:
    """A checked :class:`~whileai.judge.config.JudgeConfig` for a policy or customer endpoint.

    Raises:
        BadInput: a setting is out of range, or ``api_key_env`` names a variable that is not set (the message names
            the variable and the field, never a value).
    """
    from pydantic import ValidationError

    try:
        config = JudgeConfig(
            base_url=base_url,
            model=model,
            api_key_env=api_key_env,
            temperature=float(temperature),
            max_tokens=max_tokens,
            extra_body=dict(extra_body or {}),
            timeout_s=float(timeout_s),
            max_retries=max_retries,
            concurrency=concurrency,
            no_cache=True,
            structured_output="off",
        )
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']}" for e in error.errors())
        raise BadInput(f"{what}: {problems}") from None
    if config.api_key_env is not None and not os.environ.get(config.api_key_env):
        raise BadInput(
            f"{what}: api_key_env names {config.api_key_env}, which is not set: export {config.api_key_env}=... "
            "or leave api_key_env out for a local server without a key"
        )
    return config


class ChatClient(JudgeClient):
    """Chat completions with tools against ``config.base_url``; thread-safe, one connection pool.

    Args:
        config: the endpoint and its settings. ``no_cache`` and ``structured_output`` are ignored (always off), and
            the prompt, permutation and rubric fields are not used.
        role: what the endpoint plays, for messages: ``"policy"``, ``"customer"``.
    """

    def __init__(self, config: JudgeConfig, *, role: str = "model") -> None:
        super().__init__(config.model_copy(update={"no_cache": True, "structured_output": "off"}))
        self.role = role
        self._failure: str | None = None

    def __repr__(self) -> str:
        return f"ChatClient(role={self.role!r}, base_url={self.config.base_url!r}, model={self.config.model!r})"

    def close(self) -> None:
        """Stop the loop and the connection pool, and forget an earlier failure; a later call starts afresh."""
        super().close()
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
        spec = _ChatSpec(
            kind="chat",
            messages=[dict(message) for message in messages],  # type: ignore[misc]
            schema={},
            read=_no_reader,
            key="",
            tools=tuple(tools),
            seed=seed,
        )
        runtime = self._start()
        future = asyncio.run_coroutine_threadsafe(self._ask_all(runtime, [spec]), runtime.loop)
        try:
            outcome = future.result(timeout=self.config.batch_deadline_s + 30)
        except concurrent.futures.TimeoutError:  # the loop itself is stuck
            future.cancel()
            error: Exception | None = JudgeCallError("the client's event loop did not finish the call", "deadline")
        else:
            error = outcome[0].error
            if error is None:
                return outcome[0].answer
        message = f"{self.role} at {self.config.base_url} (model {self.config.model}) gave no answer: {error}"
        if isinstance(error, JudgeCallError) and error.kind == "http 400" and spec.tools:
            message += (
                "; if the server refuses tools, serve the model with tool calling on "
                "(vLLM: --enable-auto-tool-choice --tool-call-parser <parser>)"
            )
        self._failure = message
        raise EndpointUnavailable(message)

    # The two hooks of JudgeClient's call loop: what is sent, and how the response is read.

    def _request(self, spec: CallSpec, form: str) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": spec.messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if isinstance(spec, _ChatSpec):
            if spec.tools:
                request["tools"] = [dict(tool) for tool in spec.tools]
            if spec.seed is not None:
                request["seed"] = spec.seed
        request.update(self.config.extra_body)  # extra request fields, sent as they are
        return request

    def _read_response(self, spec: CallSpec, response: dict[str, Any]) -> ChatAnswer:
        choice = first_choice(response)  # a response without a message is retried, like a dropped connection
        finish = choice.get("finish_reason")
        usage = response.get("usage")
        return ChatAnswer(
            message=choice["message"],
            finish_reason=finish if isinstance(finish, str) else None,
            usage=usage if isinstance(usage, dict) else {},
        )
