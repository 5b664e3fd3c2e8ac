"""``JudgeClient``: judge calls, concurrent, retried, cached and bounded by a deadline, behind a sync method.

The judge's layer on top of :class:`whileai.http.client.EndpointClient`, which does the transport: one connection pool
on a background event loop (so ``run(specs)`` is a plain synchronous method that works from any thread, including
one whose own event loop is running, TRL's), the semaphore (``concurrency``), the per-call timeout, retries with
backoff and jitter on connection errors, timeouts, 408, 409, 429 (honouring ``Retry-After``), 5xx and a 200 that is
no chat completion, the batch deadline, the API key read from the variable the config names and masked in every text
that leaves it, and the call counters of ``JudgeStats``. What this layer adds: the request of a spec, the reply read
and checked by the spec's ``read`` before it counts as an answer, the answer cache (a checked answer is stored; a
cached one is not asked again) and the structured-output ladder.

Structured output (``structured_output: auto``) goes down a ladder, once per client (one endpoint) for the rest of
the session: ``response_format`` as a ``json_schema``, then as a ``json_object`` carrying the same schema (what older
llama.cpp servers and Ollama take), then none, the prompt alone asking for JSON. A step down happens at once, without
spending a retry, when the server refuses the form it was sent: an error status whose text names structured output
(llama.cpp answers ``json_schema`` with a 500, vLLM with a 400). Any other error is what it is: a 5xx is retried, a
400 fails the call.

Nothing here raises into a caller for one bad call: each spec gets its answer or the exception that stands in for
it (``JudgeCallError``, ``JudgeAnswerError``). Only a batch in which no call got through at all raises
``whileai.errors.GraderUnavailable`` (URL and first error), which the spread preflight turns into exit 4. Prompts
and answer checks live in ``prompts`` and ``answers``; what a call is in ``whileai.http.endpoint``, and HTTP in
``whileai.http.client``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from whileai.defaults import JUDGE_CONCURRENCY, LOCAL_CONCURRENCY
from whileai.errors import GraderUnavailable
from whileai.http.client import EndpointClient
from whileai.http.endpoint import Call, CallError, MalformedResponse, Outcome, first_choice
from whileai.judge.cache import JudgeCache
from whileai.judge.probabilities import reply_tokens
from whileai.judge.prompts import Message
from whileai.judge.replies import JudgeAnswerError
from whileai.judge.settings import JudgeConfig
from whileai.judge.usage import JudgeStats

__all__ = [
    "CallSpec",
    "JudgeCallError",
    "JudgeClient",
    "JudgeOutcome",
    "is_local",
    "names_structured_output",
    "server_concurrency",
]

log = logging.getLogger("whileai.judge")

# The forms of response_format, strongest first; "auto" steps down one form each time the server refuses one.
_FORMATS = ("json_schema", "json_object", "none")
# Words a server's error uses when it refuses structured output, e.g. llama.cpp's 500 'response_format type must be
# one of "text" or "json_object", but got: json_schema' and 400 'JSON schema conversion failed', vLLM's 400 'The
# provided JSON schema contains features not supported by xgrammar', Ollama's 500 'invalid JSON schema in format'.
_STRUCTURED_OUTPUT_WORDS = re.compile(
    r"response[_ ]?format|json[_ ]?schema|json[_ ]object|grammar|structured[_ ]outputs?|guided[_ ]", re.IGNORECASE
)


class JudgeCallError(CallError):
    """A judge call that got no answer after its retries (the endpoint's ``CallError``, named for the judge).

    Attributes:
        kind: ``"connection"``, ``"timeout"``, ``"deadline"``, ``"http <status>"``, ``"bad response"`` (a 200 that
            is no chat completion) or ``"error"``; the failure's reason in the stats.
    """


def names_structured_output(text: str) -> bool:
    """Whether an error text names structured output (``response_format``, a JSON schema, a grammar).

    Example:
        >>> names_structured_output("response_format type must be one of text or json_object, but got: json_schema")
        True
        >>> names_structured_output("the request exceeds the available context size")
        False
    """
    return _STRUCTURED_OUTPUT_WORDS.search(text) is not None


def is_local(base_url: str) -> bool:
    """Whether ``base_url`` names this machine (localhost, a loopback address).

    Example:
        >>> is_local("http://127.0.0.1:8080/v1"), is_local("https://api.openai.com/v1")
        (True, False)
    """
    host = (urllib.parse.urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _server_root(base_url: str) -> str:
    """The URL the server's own endpoints hang off: ``base_url`` without its ``/v1`` and its query."""
    base_url = base_url.partition("?")[0]
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


class _NoAnswer(Exception):
    """A question about the server got no reply at all."""


def server_concurrency(get: Callable[[str], tuple[int, str] | None], base_url: str) -> tuple[int, str]:
    """How many calls the server at ``base_url`` runs at once, and where that figure comes from.

    Asked in turn: llama.cpp's ``/props`` (``total_slots``), its ``/slots`` (one entry per slot), vLLM's
    ``/metrics`` (vLLM schedules up to ``max_num_seqs`` at once, 256 by default, and its metrics do not carry the
    setting). A server that answers none of them gets ``LOCAL_CONCURRENCY`` on this machine (llama-cpp-python's
    server answers one request at a time) and ``JUDGE_CONCURRENCY`` elsewhere (a hosted API); so does one that gives
    no reply at all to the first question (nothing listening, or no headers), which is then the only one asked, and
    the reason says it did not answer.

    Args:
        get: reads a URL, returning its status and text, or None when it cannot.
        base_url: the judge's base URL, up to ``/v1``.

    Example:
        >>> replies = {"http://127.0.0.1:8080/props": (200, '{"total_slots": 4}')}
        >>> server_concurrency(replies.get, "http://127.0.0.1:8080/v1")
        (4, 'the server has 4 slot(s): llama.cpp /props total_slots')
    """
    root = _server_root(base_url)

    def read(path: str) -> Any:
        reply = get(root + path)
        if reply is None:  # no answer at all (a server that never sends headers): not asked again
            raise _NoAnswer
        if reply[0] != 200:
            return None
        try:
            return json.loads(reply[1])
        except ValueError:
            return reply[1]

    try:
        props = read("/props")
        slots = props.get("total_slots") if isinstance(props, dict) else None
        if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
            return slots, f"the server has {slots} slot(s): llama.cpp /props total_slots"
        listed = read("/slots")
        if isinstance(listed, list) and listed:
            return len(listed), f"the server has {len(listed)} slot(s): llama.cpp /slots"
        metrics = read("/metrics")
        if isinstance(metrics, str) and "vllm:" in metrics:
            return (
                JUDGE_CONCURRENCY,
                f"vLLM (its /metrics): it runs up to max_num_seqs at once, {JUDGE_CONCURRENCY} by default",
            )
    except _NoAnswer:
        count = LOCAL_CONCURRENCY if is_local(base_url) else JUDGE_CONCURRENCY
        return count, f"no answer from {root}: is the server up?"
    if is_local(base_url):
        return LOCAL_CONCURRENCY, "a server on this machine that does not say how many it runs at once"
    return JUDGE_CONCURRENCY, "a remote server that does not say how many it runs at once"


@dataclass
class CallSpec:
    """One judge call to make.

    Attributes:
        kind: ``"rank"``, ``"rubric"`` or ``"score"`` (cache bookkeeping and the server's logs).
        messages: the chat messages.
        schema: the JSON schema sent in ``response_format`` while structured output is on.
        read: turns the reply's text into a checked, JSON-ready answer; raises ``JudgeAnswerError``.
        key: the cache key (model, prompt version and digest, kind, messages).
        top_logprobs: asks the server for each token's probability and this many alternatives; ``read`` then gets
            the reply's tokens as well (``whileai.judge.probabilities.reply_tokens``: None when the server sent
            none). 0 asks for none.
    """

    kind: str
    messages: list[Message]
    schema: dict[str, Any]
    read: Callable[..., Any]
    key: str
    top_logprobs: int = 0


@dataclass
class JudgeOutcome:
    """What one spec came to: its answer (from the cache or the server) or the exception standing in for it."""

    answer: Any = None
    error: Exception | None = None
    cached: bool = False


class JudgeClient:
    """Judge calls against ``config.base_url``, sharing one endpoint client (one connection pool), cache and
    ``JudgeStats``.

    The endpoint's background loop and HTTP client start on the first call (and again in a forked child);
    ``close()`` stops them, as does garbage collection.

    Raises:
        BadInput: ``config.api_key_env`` names a variable that is not set.
    """

    def __init__(self, config: JudgeConfig, stats: JudgeStats | None = None) -> None:
        self.config = config
        self.stats = stats if stats is not None else JudgeStats()
        self._format = "none"
        self._use_format("none" if config.structured_output == "off" else "json_schema")
        self.logprobs = True  # asked while the server takes them: one that refuses them is not asked again
        self.endpoint = EndpointClient(config, self.stats, name="judge", concurrency=JUDGE_CONCURRENCY)
        self.cache = None if config.no_cache else JudgeCache(config.cache_path())
        # Calls in flight at once, and why: the config's figure, or the server's, asked before the first call.
        self.concurrency: int | None = config.concurrency
        self.concurrency_source = "grader.judge.concurrency" if config.concurrency is not None else ""

    def __repr__(self) -> str:
        return f"JudgeClient(base_url={self.config.base_url!r}, model={self.config.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a JudgeClient holds a connection pool and cannot be pickled; build one in each process")

    def close(self) -> None:
        """Stop the loop, close the connection pool and the cache; a later call starts them again."""
        self.endpoint.close()
        if self.cache is not None:
            self.cache.close()

    # ------------------------------------------------------------------ the server

    def resolve_concurrency(self) -> tuple[int, str]:
        """The calls this client puts in flight at once and where the figure comes from; when the config leaves it
        to the server, the server is asked once (``server_concurrency``)."""
        if self.concurrency is None:
            # Asked as every call is: the URL without its credentials, the client's auth, the call's timeout_s.
            ask = functools.partial(self.endpoint.get, timeout_s=self.config.timeout_s)
            self.concurrency, self.concurrency_source = server_concurrency(ask, self.endpoint.url)
            self.endpoint.set_concurrency(self.concurrency)
            log.info("judge: %d call(s) at once (%s)", self.concurrency, self.concurrency_source)
        self.stats.concurrency = self.concurrency
        return self.concurrency, self.concurrency_source

    def plan(self) -> str:
        """One line on how the judge is asked: where, how many calls at once and why, and the timeouts."""
        concurrency, source = self.resolve_concurrency()
        wait = (
            f"timeout_s={self.config.timeout_s:g} between pieces of a streamed answer"
            if self.config.stream
            else f"timeout_s={self.config.timeout_s:g} per answer"
        )
        return (
            f"judge {self.config.model} at {self.endpoint.shown(self.config.base_url)}: {concurrency} call(s) at "
            f"once ({source}); {wait}; answer form {self.config.answer_form}{self._reading()}, prompts "
            f"{self.config.prompts}"
        )

    def _reading(self) -> str:
        """How the plan line says scores are read, where that is not the answer form alone."""
        config, said = self.config, ""
        if config.score_calls == "pass":
            said = " (one call a pass, the group shown first)"
        if config.answer_form == "probabilities":
            said += (
                f", each score its expected value under the judge's token probabilities (top_logprobs "
                f"{config.top_logprobs}; a score the server sends none for is read as written, and counted)"
            )
        return said

    # ------------------------------------------------------------------ structured output

    def _use_format(self, form: str) -> None:
        self._format = form
        self.stats.response_format = form
        self.stats.structured_output = form != "none"

    def _refused_format(self, sent: str, status: int, error: str) -> bool:
        """Whether an error status refuses the ``response_format`` form ``sent``; if so, step down from it.

        A 4xx or 5xx counts only when its text names structured output (``response_format``, a JSON schema, a
        grammar): any other error is an ordinary failure, whatever its status (a 400 for a malformed header or a
        context too long says nothing about the form). Calls in flight when the form changed were sent the stronger
        one: their refusal does not step again.
        """
        if self.config.structured_output != "auto" or sent == "none":
            return False
        if status < 400 or not names_structured_output(error):
            return False
        if sent == self._format:
            weaker = _FORMATS[_FORMATS.index(sent) + 1]
            self._use_format(weaker)
            log.info(
                "judge %s refused response_format %s (HTTP %s); asking with %s from now on",
                self.config.base_url,
                sent,
                status,
                "json_object" if weaker == "json_object" else "no response_format, parsing plain JSON",
            )
        return True

    def _refused_logprobs(self, spec: CallSpec, status: int, error: str) -> bool:
        """Whether an error status refuses ``logprobs`` (its text names them, as OpenAI's reasoning models' 400
        does); if so, scores are read as written from now on (counted) and the call is sent again without them."""
        if not (spec.top_logprobs and self.logprobs and status >= 400 and re.search("logprob", error, re.IGNORECASE)):
            return False
        self.logprobs = False
        log.warning(
            "judge %s refused logprobs (HTTP %s): scores are read as the judge writes them from now on",
            self.config.base_url,
            status,
        )
        return True

    # ------------------------------------------------------------------ one call

    def _request(self, spec: CallSpec, form: str) -> dict[str, Any]:
        """The body of one chat completion; ``form`` is the ``response_format`` to send (``"none"``: none)."""
        fields: dict[str, Any] = {}
        if spec.top_logprobs and self.logprobs:
            fields = {"logprobs": True, "top_logprobs": spec.top_logprobs}
        if form == "json_schema":
            response_format: dict[str, Any] = {
                "type": "json_schema",
                "json_schema": {"name": f"whileai_{spec.kind}", "schema": spec.schema},
            }
        elif form == "json_object":
            # "schema" beside the type is how llama.cpp and llama-cpp-python take a schema in JSON mode; vLLM
            # ignores the extra field and constrains to any JSON object.
            response_format = {"type": "json_object", "schema": spec.schema}
        else:
            return self.endpoint.settings.chat_request(spec.messages, **fields)
        return self.endpoint.settings.chat_request(spec.messages, response_format=response_format, **fields)

    def _read_response(self, spec: CallSpec, response: dict[str, Any]) -> Any:
        choice = first_choice(response)
        text = choice["message"].get("content")
        finish = choice.get("finish_reason")
        if finish != "length" and (text is None or (isinstance(text, str) and not text.strip())):
            raise MalformedResponse("the message is empty")
        try:
            if spec.top_logprobs:
                return spec.read(text, reply_tokens(response))
            return spec.read(text)
        except JudgeAnswerError as exc:
            if finish == "length":
                raise JudgeAnswerError(f"the reply was cut at max_tokens={self.config.max_tokens}: {exc}") from None
            raise

    def _call(self, spec: CallSpec) -> Call:
        """``spec`` as the endpoint's call: its body in the form of the moment (read when the call may go, so a call
        queued behind a refusal sends the weaker one), a refusal of the form it was sent, its reply read."""
        sent = "none"  # the form of the last body built; a call's attempts run one at a time

        def body() -> dict[str, Any]:
            nonlocal sent
            sent = self._format if spec.schema else "none"
            return self._request(spec, sent)

        def refused(status: int, error: str) -> bool:
            return self._refused_logprobs(spec, status, error) or self._refused_format(sent, status, error)

        def read(response: dict[str, Any]) -> Any:
            return self._read_response(spec, response)

        return Call(body=body, read=read, refused=refused, unusable=(JudgeAnswerError,), name=spec.kind)

    # ------------------------------------------------------------------ a batch

    def run(self, specs: list[CallSpec], fresh: bool = False) -> list[JudgeOutcome]:
        """Every spec's answer (from the cache or the server) or the exception standing in for it, in order.

        ``fresh`` asks the server even where the cache holds an answer, and stores nothing (a check of the judge
        against itself must not be answered by its own earlier answer).

        Raises:
            GraderUnavailable: no spec got an answer, every call having failed after its retries (the server is
                down, refuses, times out, or answers only errors); the message says what to try.
        """
        if not specs:
            return []
        self.resolve_concurrency()
        outcomes: list[JudgeOutcome | None] = [None] * len(specs)
        if self.cache is not None and not fresh:
            hits = self.cache.get_many(list({s.key for s in specs}))
            for i, spec in enumerate(specs):
                if spec.key in hits:
                    outcomes[i] = JudgeOutcome(answer=hits[spec.key], cached=True)
                    self.stats.count_cache_hit()
        todo = [i for i, outcome in enumerate(outcomes) if outcome is None]
        if todo:
            asked = self.endpoint.run([self._call(specs[i]) for i in todo])
            for i, outcome in zip(todo, asked, strict=True):
                # An answer that quoted a secret came in cleaned of it (the transport), so it is stored as it is.
                outcomes[i] = _judge_outcome(outcome)
                if outcome.error is None and self.cache is not None and not fresh:
                    self.cache.put(specs[i].key, specs[i].kind, outcome.answer)
        done = [o for o in outcomes if o is not None]
        if all(isinstance(o.error, JudgeCallError) for o in done):
            first = done[0].error
            raise GraderUnavailable(
                f"judge at {self.endpoint.shown(self.config.base_url)} (model {self.config.model}) answered none "
                f"of {len(done)} call(s): {first}. {self._what_to_try(first)}"
            )
        return done

    def _what_to_try(self, error: Exception | None) -> str:
        """What to change when no call got through, by how the first one failed: time for a timeout, the server for
        a 5xx, the key or the endpoint's settings for a refusal, the address for no connection. Fewer calls at once
        is offered only where more than one was made at a time."""
        kind = getattr(error, "kind", "")
        fewer = ""
        if self.concurrency > 1:
            source = self.concurrency_source
            why = f" ({source})" if source and source != "grader.judge.concurrency" else ""
            fewer = f"fewer calls at once (grader.judge.concurrency=1; now {self.concurrency}{why})"
        if kind in ("timeout", "deadline"):
            if not fewer:  # one call at a time already: the server is slow for the call, not crowded
                return "Try: a longer grader.judge.timeout_s or batch_deadline_s, or a faster server or smaller model."
            return (
                f"Try: {fewer}, a longer grader.judge.timeout_s or batch_deadline_s, or more server slots (llama.cpp's "
                "llama-server: --parallel N; vLLM: --max-num-seqs N)."
            )
        if kind == "connection":
            return (
                f"Is the server up at {self.endpoint.shown(self.config.base_url)}? Check grader.judge.base_url (up "
                "to /v1) and that the server listens there."
            )
        if kind in ("http 401", "http 403"):
            return "The server refused the key: check grader.judge.api_key_env and the key that variable holds."
        if kind == "http 429":
            return f"The server limits the rate: {fewer + ', ' if fewer else ''}wait, or ask the provider for more."
        if kind.startswith("http 4"):
            return (
                "The endpoint refused the request: check grader.judge.model (the name the server serves) and base_url."
            )
        if kind.startswith("http 5"):
            overloaded = f" If it is overloaded: {fewer}." if fewer else ""
            return (
                "The server failed on its side: its log says why (a model it does not serve, a prompt past its "
                f"context, out of memory); check grader.judge.model and the server's context length.{overloaded}"
            )
        return f"Try: {fewer + ', ' if fewer else ''}a longer grader.judge.timeout_s, or read the server's log."


def _judge_outcome(outcome: Outcome) -> JudgeOutcome:
    """The endpoint's outcome with its ``CallError`` named as the judge's."""
    error = outcome.error
    if isinstance(error, CallError) and not isinstance(error, JudgeCallError):
        error = JudgeCallError(str(error), error.kind)
    return JudgeOutcome(answer=outcome.answer, error=error)
