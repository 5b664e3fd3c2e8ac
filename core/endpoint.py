"""``EndpointClient``: chat completions against an OpenAI-compatible server, concurrent, retried and bounded by a
deadline, behind a synchronous method; the one HTTP client of the judge and of the offline path's served models.

One HTTP client (one connection pool) runs on one long-lived event loop in a background thread, so ``run(calls)`` is
a plain synchronous method that works from any thread, including one whose own event loop is running (TRL's), and
from several threads at once. For a plain ``http://`` server reached without a proxy (a local vLLM, llama.cpp,
Ollama: the judge's usual place) the client is this module's own HTTP/1.1 on asyncio's streams, at about a tenth of
the CPU per call of the alternative; for ``https://`` or through a proxy it is an ``openai.AsyncOpenAI`` client
(TLS, proxies, its error classes). A batch's calls run concurrently under a semaphore
(``concurrency``). Each call has a wall-clock timeout (``timeout_s``); connection errors, timeouts, 408, 409, 429
(honouring ``Retry-After``), 5xx and a 200 that is no chat completion (an empty or cut body, no choices, an empty
message: what a dropped reply looks like behind a proxy) are retried with exponential backoff and jitter; calls still
running at the batch deadline (``batch_deadline_s``) are cancelled.

A :class:`Call` says what to send and how to read the reply, so that a caller shapes its requests without reaching
into this module: ``body`` builds the request each time the call is sent, ``read`` turns the response into the
caller's answer (or raises :class:`MalformedResponse` to have it retried), ``refused`` may declare an error status a
refusal of the body's form, which sends the call again at once without spending a retry (the judge's
structured-output ladder), and ``unusable`` names the errors of an answer that came back but cannot be used (counted,
not retried). Nothing here raises into a caller for one bad call: each call gets an :class:`Outcome`, its answer or
the exception that stands in for it (a :class:`CallError` with its ``kind``).

The API key is read from the environment variable the settings name (:func:`read_api_key`), handed to the HTTP client
and nowhere else; any text that leaves this module (errors, logs) has it masked. :class:`EndpointStats` counts calls,
retries, tokens and latency.

What this module does not do: prompts, answer checks, caching or a structured-output policy (``whileai.judge``), or
conversations (``whileai.simulations``); it imports neither. Importing it does not import ``openai``: the HTTP client
is built on the first call, and openai only where it is the one used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import logging
import os
import random
import re
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from whileai.errors import BadInput

__all__ = [
    "NOT_A_VARIABLE_NAME",
    "Call",
    "CallError",
    "EndpointClient",
    "EndpointSettings",
    "EndpointStats",
    "MalformedResponse",
    "Outcome",
    "check_backoff",
    "check_base_url",
    "check_key_variable",
    "first_choice",
    "hide_pasted_key",
    "percentile",
    "read_api_key",
    "retry_after",
]

log = logging.getLogger("whileai.endpoint")

_PLACEHOLDER_KEY = "EMPTY"  # what vLLM's own examples send when the server has no --api-key
_RETRY_STATUSES = frozenset({408, 409, 429})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NOT_A_VARIABLE_NAME = "<not a variable name: value hidden>"  # what a pasted key is replaced with before validation


# ---------------------------------------------------------------------------------------------- settings


def check_base_url(value: str) -> str:
    """``value`` without a trailing slash, checked to be an http(s) URL.

    Raises:
        ValueError: it does not start with ``http://`` or ``https://``.

    Example:
        >>> check_base_url("http://127.0.0.1:8000/v1/")
        'http://127.0.0.1:8000/v1'
    """
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
    return value.rstrip("/")


def hide_pasted_key(data: Any) -> Any:
    """Settings ``data`` (a dict before validation) with an ``api_key_env`` that is no variable name replaced by
    :data:`NOT_A_VARIABLE_NAME`, so that no error message, even one formatted by an enclosing model, echoes a pasted
    key back.

    Example:
        >>> hide_pasted_key({"api_key_env": "sk-abc123"})["api_key_env"]
        '<not a variable name: value hidden>'
    """
    if isinstance(data, dict):
        value = data.get("api_key_env")
        if isinstance(value, str) and not _ENV_NAME.match(value):
            data = {**data, "api_key_env": NOT_A_VARIABLE_NAME}
    return data


def check_key_variable(value: str | None) -> str | None:
    """``value`` checked to be the NAME of an environment variable (or None).

    Raises:
        ValueError: it is not a variable name (a key pasted in its place, say).
    """
    if value is not None and not _ENV_NAME.match(value):
        raise ValueError(
            "api_key_env must be the NAME of an environment variable (letters, digits, underscores), "
            "not the key itself; export the key and name its variable here"
        )
    return value


def check_backoff(base_s: float, max_s: float) -> None:
    """Raises ``ValueError`` when the longest wait between retries is below the first one."""
    if max_s < base_s:
        raise ValueError(f"backoff_max_s ({max_s}) is below backoff_base_s ({base_s}); raise it")


class EndpointChecks(BaseModel):
    """The checks every endpoint model runs on its ``base_url``, ``api_key_env`` and backoff fields (the endpoint's
    own settings and ``whileai.judge.JudgeConfig``), defined once."""

    @field_validator("base_url", check_fields=False)
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_base_url(value)

    @model_validator(mode="before")
    @classmethod
    def _mask_pasted_key(cls, data: Any) -> Any:
        # A pasted key ("sk-...") is not a variable name. Swap it for a marker before field validation so that no
        # error message, even one formatted by an enclosing recipe model, can echo it back.
        return hide_pasted_key(data)

    @field_validator("api_key_env", check_fields=False)
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_key_variable(value)

    @model_validator(mode="after")
    def _backoff_order(self) -> Any:
        check_backoff(self.backoff_base_s, self.backoff_max_s)  # type: ignore[attr-defined]
        return self


class EndpointSettings(EndpointChecks):
    """Where an OpenAI-compatible chat-completions server lives, how it is sampled, and how hard the client tries.

    The judge maps its ``JudgeConfig`` onto these fields; the offline path builds them from ``model_agent``'s and
    ``customer_model``'s keyword settings.

    Example:
        >>> EndpointSettings(model="Qwen/Qwen3-8B").chat_request([{"role": "user", "content": "hi"}], seed=7)["seed"]
        7
    """

    # hide_input_in_errors: a key pasted into the wrong field must not be echoed back in the error.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, hide_input_in_errors=True)

    base_url: str = Field(
        default="http://127.0.0.1:8000/v1",
        description="Base URL of an OpenAI-compatible chat-completions server (vLLM, llama.cpp, OpenAI), up to /v1.",
    )
    model: str = Field(min_length=1, description="Model name the server serves, sent as the request's `model`.")
    api_key_env: str | None = Field(
        default=None,
        description=(
            "Name of the environment variable holding the API key (e.g. OPENAI_API_KEY), never the key itself. "
            "None sends a placeholder key, which a local vLLM server without --api-key accepts."
        ),
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature of every call.")
    max_tokens: int = Field(default=1024, ge=16, description="Most tokens the model may write per answer.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra request fields sent as they are, e.g. {chat_template_kwargs: {enable_thinking: false}}.",
    )
    timeout_s: float = Field(default=60.0, gt=0.0, description="Wall-clock limit of one HTTP call, in seconds.")
    max_retries: int = Field(
        default=4,
        ge=0,
        description=(
            "Retries of one call after a connection error, a timeout, a 408, 409 or 429, a 5xx or a 200 that is no "
            "chat completion (empty or cut body)."
        ),
    )
    backoff_base_s: float = Field(
        default=0.5, gt=0.0, description="First retry waits about this long; each later retry doubles it (jittered)."
    )
    backoff_max_s: float = Field(default=20.0, gt=0.0, description="Longest wait between two retries of a call.")
    batch_deadline_s: float = Field(
        default=600.0, gt=0.0, description="Calls of one `run` still going after this many seconds are cancelled."
    )
    concurrency: int = Field(default=32, ge=1, description="Most calls in flight at once, on one connection pool.")

    def chat_request(self, messages: Sequence[Any], **fields: Any) -> dict[str, Any]:
        """The body of one chat completion: ``model``, ``messages``, ``temperature``, ``max_tokens``, then
        ``fields`` (``tools``, ``seed``, ``response_format`` ...), then ``extra_body`` on top, sent as it is."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **fields,
        }
        request.update(self.extra_body)
        return request


def read_api_key(api_key_env: str | None, *, field: str = "api_key_env") -> str:
    """The API key from the environment variable ``api_key_env`` names; a placeholder when it names none.

    Args:
        api_key_env: the variable's name, or None for a local server without a key.
        field: the setting's name as the user wrote it, for the message (``judge.api_key_env``).

    Raises:
        BadInput: the variable is named but not set (the message names the variable, never a value).
    """
    if api_key_env is None:
        return _PLACEHOLDER_KEY
    key = os.environ.get(api_key_env, "")
    if not key:
        raise BadInput(
            f"{field} names {api_key_env}, which is not set: export {api_key_env}=... "
            "or leave api_key_env out for a local server without a key"
        )
    return key


# ---------------------------------------------------------------------------------------------- accounting


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation between order statistics; None for no values.

    Example:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
        2.5
    """
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class EndpointStats:
    """Counters of one endpoint client; thread-safe (the client's event loop and the callers' threads write them).

    Attributes:
        calls: HTTP requests sent, retries included.
        retries: requests that repeated an earlier one after a connection error, timeout, 408, 409, 429, 5xx or a
            200 that was no chat completion. A call sent again at once after its form was refused is a call, not a
            retry.
        tokens_in, tokens_out: prompt and completion tokens the server reported.
        latencies: seconds of each answered request.

    Example:
        >>> stats = EndpointStats()
        >>> stats.count_call(retry=False)
        >>> stats.count_answer(0.25, 100, 10)
        >>> str(stats)
        '1 calls (0 retries), tokens 100 in / 10 out, latency p50 0.250s p95 0.250s'
    """

    calls: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latencies: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_call(self, *, retry: bool) -> None:
        with self._lock:
            self.calls += 1
            self.retries += int(retry)

    def count_answer(self, seconds: float, tokens_in: int, tokens_out: int) -> None:
        with self._lock:
            self.latencies.append(seconds)
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out

    def as_dict(self) -> dict[str, Any]:
        """The counters as JSON-ready values, latencies as p50/p95."""
        with self._lock:
            latencies = list(self.latencies)
            return {
                "calls": self.calls,
                "retries": self.retries,
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "latency_p50_s": percentile(latencies, 50),
                "latency_p95_s": percentile(latencies, 95),
            }

    def __str__(self) -> str:
        d = self.as_dict()
        p50, p95 = d["latency_p50_s"], d["latency_p95_s"]
        latency = f"latency p50 {p50:.3f}s p95 {p95:.3f}s" if p50 is not None else "no latency yet"
        return (
            f"{d['calls']} calls ({d['retries']} retries), tokens {d['tokens_in']} in / {d['tokens_out']} out, "
            f"{latency}"
        )


# ---------------------------------------------------------------------------------------------- calls and outcomes


class CallError(RuntimeError):
    """A call that got no answer after its retries.

    Attributes:
        kind: ``"connection"``, ``"timeout"``, ``"deadline"``, ``"http <status>"``, ``"bad response"`` (a 200 that
            is no chat completion) or ``"error"``; the failure's reason in a caller's stats.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class MalformedResponse(Exception):
    """A 200 that is no usable chat completion: an empty or cut body, a body that is not a JSON object, no choices,
    an empty message. Retried like a dropped connection, which is what it usually is (a proxy or an overloaded server
    that gave up mid-reply)."""


def first_choice(response: Any) -> dict[str, Any]:
    """The first choice of a chat-completion response, checked to hold a ``message`` object.

    Raises:
        MalformedResponse: the response has no choices (a 200 carrying only an ``error`` says so) or its first choice
            no message.

    Example:
        >>> first_choice({"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}]})["finish_reason"]
        'stop'
    """
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices:
        error = response.get("error") if isinstance(response, dict) else None
        if error:
            raise MalformedResponse(f"the body is an error, not a chat completion: {str(error)[:200]}")
        raise MalformedResponse("the body has no choices")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise MalformedResponse("the first choice has no message")
    return choice


@dataclass(frozen=True)
class Call:
    """One chat completion to make, and how its reply becomes an answer.

    Attributes:
        body: builds the request body (see ``EndpointSettings.chat_request``); called each time the call is sent,
            once it holds a slot under the concurrency limit, so a body may depend on what earlier calls learnt.
        read: turns the response (a JSON object) into the answer. It raises ``MalformedResponse`` for a 200 that is
            no usable chat completion (retried) and one of ``unusable`` for an answer that cannot be used; anything
            else it raises fails the call with kind ``"error"``, not retried.
        refused: given an error status and the error's text, says whether the server refused the form of the body,
            which ``body`` now builds differently: the call is then sent again at once, without spending a retry.
            None: no status is a refusal.
        unusable: the exception types ``read`` raises for an answer that came back but cannot be used: the answer is
            counted, not retried, and the exception is the call's outcome (rebuilt from its message, with the API key
            masked, so each type must take the message as its one argument).
        name: what the call is, for logs (``"rank"``, ``"chat"``).
    """

    body: Callable[[], dict[str, Any]]
    read: Callable[[dict[str, Any]], Any]
    refused: Callable[[int, str], bool] | None = None
    unusable: tuple[type[Exception], ...] = ()
    name: str = "call"


@dataclass(frozen=True)
class Outcome:
    """What one call came to: its answer, or the exception standing in for it (``error`` is then set)."""

    answer: Any = None
    error: Exception | None = None


def retry_after(response: Any) -> float | None:
    """Seconds a 429 or 503 asks to wait (``retry-after-ms``, ``retry-after`` in seconds or as an HTTP date); None
    when the response's headers ask nothing."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status_text(exc: Any) -> str:
    """An error status's text: the client's message, and the raw body when the client found no message in it (it
    reads only ``{"error": {"message": ...}}`` and ``{"message": ...}``, not Ollama's ``{"error": "..."}``)."""
    text = str(exc)
    if text == f"Error code: {getattr(exc, 'status_code', '')}":
        try:
            body = exc.response.text
        except Exception:  # a body that cannot be read adds nothing
            body = ""
        if body.strip():
            text = f"{text} - {body.strip()}"
    return text


# ---------------------------------------------------------------------------------------------- transports


class _StatusError(Exception):
    """An error status from the server: its code, its text, and the response's headers (for ``retry_after``)."""

    def __init__(self, status: int, text: str, headers: dict[str, str]) -> None:
        super().__init__(text)
        self.status_code = status
        self.text = text
        self.response = _Headers(headers)


class _Headers:
    """What ``retry_after`` reads of a response: its headers, by lower-case name."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class _ConnectionLost(Exception):
    """No answer because of the connection: refused, reset, closed before the reply was whole."""


class _TimedOut(Exception):
    """The HTTP client's own timeout (the batch's ``asyncio.wait_for`` is the other one)."""


def _plain_http(base_url: str) -> bool:
    """Whether ``base_url`` is a plain ``http://`` server reached without a proxy (the environment's ``http_proxy``,
    ``all_proxy`` and ``no_proxy``, as httpx reads them)."""
    if not base_url.startswith("http://"):
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return True
    host = urllib.parse.urlsplit(base_url).hostname or ""
    return bool(urllib.request.proxy_bypass(host))


class _Http11:
    """Chat-completion POSTs over HTTP/1.1 with keep-alive, on asyncio's streams, for a plain ``http://`` server.

    openai's client on httpx spends 2-4 ms of CPU per call (its connection pool probes every idle connection each
    time a request comes or goes, and every request and response is built as objects); a local judge answers 64
    calls in flight in about one call's latency, so that CPU, serialized on one event loop, was most of a batch's
    time (benchmarks/README.md, judge). This writes the request in one piece and reads the status line, the headers
    and a ``Content-Length`` or chunked body: about 0.2 ms a call. HTTPS, proxies and anything else go through
    openai's client.

    Idle connections are kept for ``keepalive_s`` and checked before reuse; a kept connection the server closed
    meanwhile (uvicorn closes idle ones after 5 s) gets the request again on a fresh one, once. A call cancelled or
    failed mid-request closes its connection: its reply could still arrive on it.
    """

    def __init__(self, base_url: str, api_key: str, *, keep: int, keepalive_s: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.netloc = parts.netloc
        self.api_key = api_key
        self.keep = keep
        self.keepalive_s = keepalive_s
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    def _head(self, path: str, length: int) -> bytes:
        return (
            f"POST {self.prefix}{path} HTTP/1.1\r\nhost: {self.netloc}\r\naccept: application/json\r\n"
            f"content-type: application/json\r\nauthorization: Bearer {self.api_key}\r\nuser-agent: whileai\r\n"
            f"content-length: {length}\r\n\r\n"
        ).encode("latin-1")

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """An idle connection still open (reused: True), else a new one."""
        now = time.monotonic()
        while self.idle:
            reader, writer, since = self.idle.pop()
            if now - since < self.keepalive_s and not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.close()
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=2**20)
        except OSError as exc:
            raise _ConnectionLost(f"cannot connect to {self.netloc}: {exc}") from None
        return reader, writer, False

    async def post(self, path: str, request: dict[str, Any]) -> str:
        """POST ``request`` as JSON and return the body's text; raises ``_StatusError`` for a status >= 300 and
        ``_ConnectionLost`` when the connection fails."""
        body = json.dumps(request, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        data = self._head(path, len(body)) + body
        while True:
            reader, writer, reused = await self._connection()
            started = False  # any byte of the reply read
            try:
                writer.write(data)
                await writer.drain()
                line = await reader.readline()
                if not line:
                    raise ConnectionResetError("the server closed the connection")
                started = True
                status, headers, text, keep = await _read_reply(line, reader)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:  # ValueError: not an HTTP reply
                writer.close()
                if reused and not started:
                    continue  # a kept connection the server had closed: send again on a new one
                raise _ConnectionLost(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
            except BaseException:  # cancelled at a timeout or the deadline: the reply may still come on it
                writer.close()
                raise
            if keep and len(self.idle) < self.keep:
                self.idle.append((reader, writer, time.monotonic()))
            else:
                writer.close()
            if status >= 300:
                raise _StatusError(status, f"Error code: {status} - {text}", headers)
            return text

    async def close(self) -> None:
        while self.idle:
            self.idle.pop()[1].close()


async def _read_reply(line: bytes, reader: asyncio.StreamReader) -> tuple[int, dict[str, str], str, bool]:
    """The status, headers (lower-case names), body text and whether the connection may be kept, of a reply whose
    status line is ``line``."""
    while True:
        version, _, rest = line.decode("latin-1").partition(" ")
        status = int(rest.split(" ", 1)[0])
        headers: dict[str, str] = {}
        while True:
            field = await reader.readline()
            if field in (b"\r\n", b"\n"):
                break
            if not field:
                raise asyncio.IncompleteReadError(b"", None)
            name, _, value = field.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if status >= 200:
            break
        line = await reader.readline()  # a 1xx before the reply
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    if status in (204, 304):
        raw = b""  # no body by definition
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"x", 16)
            if not size:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        raw = b"".join(parts)
    elif "content-length" in headers:
        raw = await reader.readexactly(int(headers["content-length"]))
    else:
        raw, keep = await reader.read(), False
    charset = "utf-8"
    for param in headers.get("content-type", "").split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip('"')
    try:
        text = raw.decode(charset, errors="replace")
    except LookupError:  # a charset Python does not know
        text = raw.decode("utf-8", errors="replace")
    return status, headers, text, keep


# ---------------------------------------------------------------------------------------------- the client


class _LoopThread:
    """A daemon thread running one event loop, and what lives on it (the HTTP client, the semaphore)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=f"whileai-{name}-loop", daemon=True)
        self.http: Any = None
        self.semaphore: asyncio.Semaphore | None = None
        self.pid = os.getpid()
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        """Close the HTTP client and stop the loop (a no-op in a forked child, which does not own them)."""
        if self.pid != os.getpid() or self.loop.is_closed():
            return
        if self.http is not None and self.thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self.http.close(), self.loop).result(timeout=5)
            except Exception:  # closing is best effort
                pass
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class EndpointClient:
    """Calls against ``settings.base_url``, sharing one connection pool and one ``EndpointStats``.

    Args:
        settings: the endpoint and how hard to try.
        stats: the counters to add to (a subclass with more counters is fine); a fresh ``EndpointStats`` by default.
        name: what the endpoint plays (``"judge"``, ``"policy"``), for messages and logs.

    Raises:
        BadInput: ``settings.api_key_env`` names a variable that is not set.

    The background loop and the HTTP client start on the first call (and again in a forked child); ``close()``
    stops them, as does garbage collection.
    """

    def __init__(
        self, settings: EndpointSettings, stats: EndpointStats | None = None, *, name: str = "endpoint"
    ) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else EndpointStats()
        self.name = name
        self._api_key = read_api_key(settings.api_key_env, field=f"{name}.api_key_env")
        self._runtime: _LoopThread | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EndpointClient(name={self.name!r}, base_url={self.settings.base_url!r}, model={self.settings.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an EndpointClient holds a connection pool and cannot be pickled; build one in each process")

    def redact(self, text: str) -> str:
        """``text`` with the API key masked (a server may echo a request back in its error or its reply)."""
        key = self._api_key
        if key and key != _PLACEHOLDER_KEY and len(key) >= 4:
            text = text.replace(key, "[api key hidden]")
        return text

    # ------------------------------------------------------------------ the background loop

    def _start(self) -> _LoopThread:
        with self._start_lock:
            runtime = self._runtime
            if runtime is not None and runtime.pid == os.getpid() and runtime.thread.is_alive():
                return runtime
            runtime = _LoopThread(self.name)
            self._runtime = runtime
            if self._finalizer is not None:
                self._finalizer.detach()
            self._finalizer = weakref.finalize(self, runtime.stop)
            return runtime

    def close(self) -> None:
        """Stop the loop and close the connection pool; a later call starts them again."""
        with self._start_lock:
            if self._finalizer is not None:
                self._finalizer()
                self._finalizer = None
            self._runtime = None

    async def _ensure_http(self, runtime: _LoopThread) -> None:
        if runtime.http is not None:
            return
        if _plain_http(self.settings.base_url):
            runtime.http = _Http11(self.settings.base_url, self._api_key, keep=self.settings.concurrency)
        else:
            import openai  # imported on the first call, never by `import whileai`

            # One pool sized to the semaphore; idle connections are kept for a minute (httpx's default is 5 s),
            # so the next batch of a training run reuses them instead of opening `concurrency` new ones.
            limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
                max_connections=max(self.settings.concurrency * 2, 16),
                max_keepalive_connections=self.settings.concurrency,
                keepalive_expiry=60.0,
            )
            runtime.http = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.settings.base_url,
                max_retries=0,
                timeout=self.settings.timeout_s,
                http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=self.settings.timeout_s),
            )
        runtime.semaphore = asyncio.Semaphore(self.settings.concurrency)

    # ------------------------------------------------------------------ one call

    def _backoff(self, attempt: int) -> float:
        base = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2**attempt)
        return base * random.uniform(0.5, 1.0)

    async def _post(self, runtime: _LoopThread, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """POST one chat completion and return the response's JSON object.

        A plain ``http://`` server is asked by :class:`_Http11`; any other through the official client's ``post``
        (its connection pool, auth, TLS, proxies and timeout) with a plain JSON body: ``chat.completions.create``
        walks every request through its typed transform and builds a pydantic model of every response, about 4 ms
        of CPU per call, which at 64 calls in flight on a small CPU costs more than the judge's own latency
        (benchmarks/README.md, judge). The body is read as text and decoded here, so that an empty or cut one is told
        apart from any other error.

        Raises:
            MalformedResponse: a 200 whose body is empty, not JSON (cut short, or a proxy's HTML page) or not an
                object.
            _StatusError, _ConnectionLost, _TimedOut: the call got no reply (either client's errors, as one kind).
        """
        http = runtime.http
        if isinstance(http, _Http11):
            text = await http.post("/chat/completions", request)
        else:
            import openai

            try:
                text = await http.post("/chat/completions", body=request, cast_to=str, options={"timeout": timeout})
            except openai.APITimeoutError:
                raise _TimedOut() from None
            except openai.APIConnectionError as exc:
                raise _ConnectionLost(str(exc)) from None
            except openai.APIStatusError as exc:
                headers = {k.lower(): v for k, v in getattr(exc.response, "headers", {}).items()}
                raise _StatusError(exc.status_code, _status_text(exc), headers) from None
        if not text.strip():
            raise MalformedResponse("the body is empty")
        try:
            response = json.loads(text)
        except ValueError:
            shown = " ".join(self.redact(text[:80]).split())
            raise MalformedResponse(
                f"the body is not JSON (cut short?) after {len(text)} characters: {shown!r}"
            ) from None
        if not isinstance(response, dict):
            raise MalformedResponse("the body is not a JSON object")
        return response

    def _count_answer(self, started: float, response: dict[str, Any]) -> None:
        usage = response.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        self.stats.count_answer(
            time.perf_counter() - started,
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )

    async def _ask(self, runtime: _LoopThread, call: Call, deadline: float) -> Any:
        settings = self.settings
        loop = asyncio.get_running_loop()
        attempt = 0
        retry = False  # a repeat after a failure; a call sent again after a refused form is not one
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise CallError("the batch deadline passed before the call could be made", "deadline")
            wait_hint: float | None = None
            assert runtime.semaphore is not None
            async with runtime.semaphore:
                # The body is built once the call may go, so a call queued behind a refusal sends the new form.
                request = call.body()
                self.stats.count_call(retry=retry)
                started = time.perf_counter()
                timeout = min(settings.timeout_s, remaining)
                response: dict[str, Any] = {}
                try:
                    response = await asyncio.wait_for(self._post(runtime, request, timeout), timeout=timeout)
                    answer = call.read(response)
                except (asyncio.TimeoutError, _TimedOut):
                    if timeout < settings.timeout_s:
                        raise CallError(f"the batch deadline passed after {timeout:.1f}s", "deadline") from None
                    error = CallError(f"no answer within timeout_s={settings.timeout_s}", "timeout")
                    retryable = True
                except _ConnectionLost as exc:
                    error = CallError(f"connection error: {self.redact(str(exc))}", "connection")
                    retryable = True
                except _StatusError as exc:
                    status = exc.status_code
                    text = exc.text
                    if call.refused is not None and call.refused(status, text):
                        retry = False
                        continue  # send again at once in the new form; no retry spent
                    message = " ".join(self.redact(text).split())[:300]
                    error = CallError(f"HTTP {status}: {message}", f"http {status}")
                    retryable = status in _RETRY_STATUSES or status >= 500
                    if status in (429, 503):
                        wait_hint = retry_after(exc.response)
                except MalformedResponse as exc:
                    error = CallError(f"HTTP 200 but {self.redact(str(exc))}", "bad response")
                    retryable = True
                except call.unusable:  # an answer, just not a usable one: counted, and not retried
                    self._count_answer(started, response)
                    raise
                except Exception as exc:  # anything else the HTTP stack (or a reader) raises
                    message = self.redact(str(exc)).splitlines()[0][:300] if str(exc) else ""
                    error = CallError(f"{type(exc).__name__}: {message}", "error")
                    retryable = False
                else:
                    self._count_answer(started, response)
                    return answer
            if not retryable or attempt >= settings.max_retries:
                if attempt:
                    error = CallError(f"{error} (after {attempt} retries)", error.kind)
                raise error
            delay = wait_hint if wait_hint is not None else self._backoff(attempt)
            if loop.time() + delay >= deadline:
                raise CallError(f"{error} (no time left before the batch deadline to retry)", error.kind)
            log.debug(
                "%s call %s failed (%s); retry %d/%d in %.2fs",
                self.name,
                call.name,
                error,
                attempt + 1,
                settings.max_retries,
                delay,
            )
            await asyncio.sleep(delay)
            attempt += 1
            retry = True

    async def _ask_safely(self, runtime: _LoopThread, call: Call, deadline: float) -> Outcome:
        try:
            return Outcome(answer=await self._ask(runtime, call, deadline))
        except CallError as exc:
            return Outcome(error=exc)
        except call.unusable as exc:  # its message quotes the reply, which could quote anything
            return Outcome(error=type(exc)(self.redact(str(exc))))
        except Exception as exc:  # a bug in a reader must not stop the batch
            text = self.redact(str(exc)).splitlines()[0][:300] if str(exc) else ""
            return Outcome(error=CallError(f"{type(exc).__name__}: {text}", "error"))

    async def _ask_all(self, runtime: _LoopThread, calls: Sequence[Call]) -> list[Outcome]:
        await self._ensure_http(runtime)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.batch_deadline_s
        tasks = [asyncio.ensure_future(self._ask_safely(runtime, call, deadline)) for call in calls]
        _, pending = await asyncio.wait(tasks, timeout=self.settings.batch_deadline_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        late = CallError(f"cancelled at the batch deadline ({self.settings.batch_deadline_s}s)", "deadline")
        return [Outcome(error=late) if task in pending else task.result() for task in tasks]

    # ------------------------------------------------------------------ a batch

    def run(self, calls: Sequence[Call]) -> list[Outcome]:
        """Every call's answer or the exception standing in for it, in order; all of them in flight at once (up to
        ``concurrency``), within one ``batch_deadline_s``. Never raises for a failed call."""
        if not calls:
            return []
        runtime = self._start()
        future = asyncio.run_coroutine_threadsafe(self._ask_all(runtime, calls), runtime.loop)
        try:
            return future.result(timeout=self.settings.batch_deadline_s + 30)
        except concurrent.futures.TimeoutError:  # the loop itself is stuck; never block a caller forever
            future.cancel()
            stuck = CallError(f"the {self.name}'s event loop did not finish the batch", "deadline")
            return [Outcome(error=stuck) for _ in calls]
