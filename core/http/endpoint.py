"""What a call to an OpenAI-compatible server is and how it is made: the settings (``EndpointSettings``, which the
judge's config extends), the calls and their outcomes, the errors, the counters. The client that makes the calls
over HTTP is ``whileai.http.client.EndpointClient``; this module imports no HTTP, asyncio or ssl, so the recipe
schema that reads these settings stays light.

Each call has a timeout (``timeout_s``: for the whole answer, or for the silence between two pieces of a streamed
one); connection errors, timeouts, 408, 409, 429 (honouring ``Retry-After``), 5xx and a 200 that is no chat
completion (an empty or cut body, no choices, an empty message: what a dropped reply looks like behind a proxy) are
retried with exponential backoff and jitter; a call still running ``batch_deadline_s`` after it was first sent is
cancelled.

A :class:`Call` says what to send and how to read the reply, so that a caller shapes its requests without reaching
into the client: ``body`` builds the request each time the call is sent, ``read`` turns the response into the
caller's answer (or raises :class:`MalformedResponse` to have it retried), ``refused`` may declare an error status a
refusal of the body's form, which sends the call again at once without spending a retry (the judge's
structured-output ladder), and ``unusable`` names the errors of an answer that came back but cannot be used (counted,
not retried). Nothing raises into a caller for one bad call: each call gets an :class:`Outcome`, its answer or
the exception that stands in for it (a :class:`CallError` with its ``kind``).

The API key is read from the environment variable the settings name (:func:`read_api_key`), handed to the HTTP client
and nowhere else; every text a server sends back is cleaned of it where it comes in (``whileai.http.secrets``, run by
``whileai.http.transport``). A ``user:password@`` in the base URL
is masked in every repr and dump of the settings (:func:`masked_url`). :class:`EndpointStats` counts calls, retries,
tokens and latency.

What this module does not do: prompts, answer checks, caching or a structured-output policy (``whileai.judge``), or
conversations (``whileai.simulations``); it imports neither.
"""

from __future__ import annotations

import copy
import threading
import time
import unicodedata
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from whileai.defaults import CHAT_CONCURRENCY, ENDPOINT_MAX_RETRIES, ENDPOINT_MAX_TOKENS, ENDPOINT_TIMEOUT_S
from whileai.http.secrets import MARK, check_key_variable, hide_pasted_key, masked_url
from whileai.stats import quantile

__all__ = [
    "RETRY_STATUSES",
    "Call",
    "CallError",
    "EndpointSettings",
    "EndpointStats",
    "MalformedResponse",
    "Outcome",
    "check_backoff",
    "check_base_url",
    "endpoint_url",
    "first_choice",
    "retry_after",
]


RETRY_STATUSES = frozenset({408, 409, 429})


# ---------------------------------------------------------------------------------------------- settings


def check_base_url(value: str) -> str:
    """``value`` without a trailing slash, checked to be an http(s) URL a request can be sent to.

    Raises:
        ValueError: it does not start with ``http://`` or ``https://``; it holds whitespace or a control character
            (a CR or LF would be dropped from the request line or smuggle a header); it names no host, a host that
            is no host name, a port that is no number from 1 to 65535, or a fragment (``#...``, which no request
            carries). A query (``?api-version=...``, as Azure OpenAI asks) is kept after the path each call adds.

    Example:
        >>> check_base_url("HTTP://127.0.0.1:8000/v1/")
        'http://127.0.0.1:8000/v1'
        >>> check_base_url("http://127.0.0.1:99999/v1")
        Traceback (most recent call last):
        ...
        ValueError: base_url's port 99999 is not a port: a number from 1 to 65535
    """
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError("base_url must start with http:// or https://")
    value = f"{scheme.lower()}://{rest}"  # a scheme is read in any case (RFC 3986), and kept in lower case
    if MARK in value:  # what a run's recipe.yaml keeps in place of a URL's password
        raise ValueError(
            f"base_url holds {MARK} where the run's recipe.yaml left out the URL's password: give the URL again "
            "(grader.judge.base_url=URL on the command line)"
        )
    control = next((i for i, c in enumerate(value) if c.isspace() or ord(c) < 32 or ord(c) == 127), None)
    if control is not None:  # a CR or LF would be dropped from the request line, or put a header in it
        raise ValueError(f"base_url holds a space, line break or control character at position {control}: remove it")
    # A zero-width or bidi character (Unicode's format class) shows nothing, or turns the text around, where it is
    # printed: the URL a user reads would not be the one called.
    hidden = next((i for i, c in enumerate(value) if unicodedata.category(c) == "Cf"), None)
    if hidden is not None:
        raise ValueError(
            f"base_url holds an invisible or bidi character (U+{ord(value[hidden]):04X}) at position {hidden}: "
            "remove it"
        )
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname or ""
    except ValueError as err:  # an IPv6 address with a bracket left open, a port that is no number
        raise ValueError(f"base_url cannot be read as a URL ({err})") from None
    if not host:
        raise ValueError("base_url names no host (http://HOST:PORT/v1)")
    try:
        host.encode("idna")
    except UnicodeError:
        raise ValueError(f"base_url's host {host!r} is not a host name") from None
    port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]  # after an IPv6 literal's brackets
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):  # not "٨٠", which isdigit
        if port.isascii() and port.isdigit():
            raise ValueError(f"base_url's port {port} is not a port: a number from 1 to 65535")
        # Not quoted: the text after a ':' may be a password holding a '/', '?' or '#' that ended the host early.
        raise ValueError(
            "base_url's port is not a number from 1 to 65535 (a password holding '/', '?' or '#' must be written "
            "percent-encoded: %2F, %3F, %23)"
        )
    if parts.fragment or value.endswith("#"):
        raise ValueError("base_url holds a fragment (#...), which no request carries: remove it")
    return value.rstrip("/")


def endpoint_url(base_url: str, path: str) -> str:
    """The URL of ``path`` on the server at ``base_url``: added to its path, its query kept after it.

    Example:
        >>> endpoint_url("https://x.example/openai/deployments/d?api-version=preview", "/chat/completions")
        'https://x.example/openai/deployments/d/chat/completions?api-version=preview'
    """
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def check_backoff(base_s: float, max_s: float) -> None:
    """Raises ``ValueError`` when the longest wait between retries is below the first one."""
    if max_s < base_s:
        raise ValueError(f"backoff_max_s ({max_s}) is below backoff_base_s ({base_s}); raise it")


class EndpointSettings(BaseModel):
    """Where an OpenAI-compatible chat-completions server lives, how it is sampled, and how hard the client tries:
    every such setting, declared once. The judge's ``JudgeConfig`` is these fields plus the judge's own; the offline
    path builds them from ``model_agent``'s and ``customer_model``'s keyword settings.

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
    max_tokens: int = Field(
        default=ENDPOINT_MAX_TOKENS, ge=16, description="Most tokens the model may write per answer."
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Extra request fields sent as they are, e.g. {chat_template_kwargs: {enable_thinking: false}} for Qwen3 "
            "on vLLM, or {top_k: 1}."
        ),
    )
    stream: bool = Field(
        default=True,
        description=(
            "Stream each answer (`stream: true`): timeout_s then bounds the silence between two pieces of the answer, "
            "not the whole answer, so a slow model that is writing never times out, and a call given up closes its "
            "connection, which stops the server's work on it. A server that answers in one piece is read as it is. "
            "The offline path's clients, which read tool calls, ask for whole answers."
        ),
    )
    timeout_s: float = Field(
        default=ENDPOINT_TIMEOUT_S,
        gt=0.0,
        description=(
            "Seconds a call may wait for the server's next piece of the answer (with stream: false, for the whole "
            "answer). The wait for the first piece includes the server reading the prompt. A new connection (TCP and "
            "TLS) and the question of how many calls the server runs at once have as long."
        ),
    )
    max_retries: int = Field(
        default=ENDPOINT_MAX_RETRIES,
        ge=0,
        description=(
            "Retries of one call after a connection error, a timeout, a 408, 409 or 429, a 5xx or a 200 that is no "
            "chat completion (empty or cut body)."
        ),
    )
    backoff_base_s: float = Field(
        default=0.5, gt=0.0, description="First retry waits about this long; each later retry doubles it (jittered)."
    )
    backoff_max_s: float = Field(
        default=20.0,
        gt=0.0,
        description="Longest wait between two retries of a call, a server's Retry-After included (it is capped here).",
    )
    batch_deadline_s: float = Field(
        default=600.0,
        gt=0.0,
        description=(
            "A call still running this many seconds after it was first sent (retries included) is cancelled and its "
            "group falls back; time queued behind the concurrency limit does not count."
        ),
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Most calls in flight at once, on one connection pool. None leaves it to the client: the judge asks the "
            "server (llama.cpp's /props or /slots, vLLM's /metrics) and otherwise takes 1 on this machine and 256 "
            f"elsewhere; a policy or customer client takes {CHAT_CONCURRENCY}."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_base_url(value)

    @field_serializer("base_url")
    def _masked_base_url(self, value: str) -> str:
        # A recipe dumped into a run folder, a --print, a JSON report: none of them carries the URL's password.
        return masked_url(value)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, masked_url(value) if name == "base_url" and isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _mask_pasted_key(cls, data: Any) -> Any:
        # A pasted key ("sk-...") is not a variable name. Swap it for a marker before field validation so that no
        # error message, even one formatted by an enclosing recipe model, can echo it back.
        return hide_pasted_key(data)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_key_variable(value)

    @model_validator(mode="after")
    def _backoff_order(self) -> Any:
        check_backoff(self.backoff_base_s, self.backoff_max_s)
        return self

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
        if self.stream:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}
        request.update(self.extra_body)
        return request


# ---------------------------------------------------------------------------------------------- accounting


@dataclass
class EndpointStats:
    """Counters of one endpoint client; thread-safe (the client's event loop and the callers' threads write them).

    Attributes:
        calls: HTTP requests sent, retries included.
        retries: requests that repeated an earlier one after a connection error, timeout, 408, 409, 429, 5xx or a
            200 that was no chat completion. A call sent again at once after its form was refused is a call, not a
            retry.
        resent: requests sent again at once on a new connection, after a kept one died before any reply or brought
            a 408 (calls, not retries).
        tokens_in, tokens_out: prompt and completion tokens the server reported.
        latencies: seconds of each answered request.

    Example:
        >>> stats = EndpointStats()
        >>> stats.count_call(retry=False)
        >>> stats.count_answer(0.25, 100, 10)
        >>> str(stats)
        '1 calls (0 retries), tokens 100 in / 10 out, latency p50 0.250s p95 0.250s'
    """

    STATE: ClassVar[frozenset[str]] = frozenset()

    calls: int = 0
    retries: int = 0
    resent: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latencies: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_call(self, *, retry: bool, resent: bool = False) -> None:
        with self._lock:
            self.calls += 1
            self.retries += int(retry)
            self.resent += int(resent)

    def snapshot(self) -> dict[str, Any]:
        """The counters as they are now (copies), for ``restore``: work whose calls are not to count (the spread
        gate's, in a training run's figures) sits between the two. What describes the client now rather than counts
        its calls (``STATE``) is left as it is."""
        with self._lock:
            kept = (f.name for f in fields(self) if f.name != "_lock" and f.name not in self.STATE)
            return {name: copy.deepcopy(getattr(self, name)) for name in kept}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Put back the counters a ``snapshot`` took, in place (the clients that count into this object keep it)."""
        with self._lock:
            for name, value in snapshot.items():
                setattr(self, name, copy.deepcopy(value))

    def count_streamed(self, pieces: int) -> None:
        """Count pieces of a streamed answer as completion tokens as they come; the answer's usage corrects it."""
        with self._lock:
            self.tokens_out += pieces

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
                "resent": self.resent,
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "latency_p50_s": quantile(latencies, 0.50) if latencies else None,
                "latency_p95_s": quantile(latencies, 0.95) if latencies else None,
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
        if error:  # quoted whole: the client masks the key, then cuts
            raise MalformedResponse(f"the body is an error, not a chat completion: {error}")
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


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a 429 or 503 asks to wait (``retry-after-ms``, ``retry-after`` in seconds or as an HTTP date), from
    the response's headers by lower-case name; None when they ask nothing.

    Example:
        >>> retry_after({"retry-after-ms": "250"}), retry_after({})
        (0.25, None)
    """
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
    import email.utils  # a rare header form: imported when met

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
