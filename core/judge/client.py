"""``JudgeClient``: judge calls over HTTP, concurrent, retried, cached and bounded by a deadline, behind a sync method.

One ``openai.AsyncOpenAI`` client (one connection pool) runs on one long-lived event loop in a background thread,
so ``run(specs)`` is a plain synchronous method that works from any thread, including one whose own event loop is
running (TRL's). A batch's calls run concurrently under a semaphore (``concurrency``). Each call has a wall-clock
timeout; connection errors, timeouts, 408, 409, 429 (honouring ``Retry-After``), 5xx and a 200 that is no chat
completion (an empty or cut body, no choices, an empty message: what a dropped reply looks like behind a proxy) are
retried with exponential backoff and jitter; calls still running at the batch deadline are cancelled. A reply is
parsed and checked by the spec's ``read`` before it counts as an answer; the checked answer is stored in the cache.

Structured output (``structured_output: auto``) goes down a ladder, once per client (one endpoint) for the rest of
the session: ``response_format`` as a ``json_schema``, then as a ``json_object`` carrying the same schema (what older
llama.cpp servers and Ollama take), then none, the prompt alone asking for JSON. A step down happens at once, without
spending a retry, when the server refuses the form it was sent: a 400 or 422, or a 5xx whose error names structured
output (llama.cpp answers ``json_schema`` with a 500). Any other 5xx is retried as usual.

Nothing here raises into a caller for one bad call: each spec gets its answer or the exception that stands in for
it (``JudgeCallError``, ``JudgeAnswerError``). Only a batch in which no call got through at all raises
``whileai.errors.GraderUnavailable`` (URL and first error), which the spread preflight turns into exit 4. The API key
is read from the environment variable the config names, handed to the HTTP client and nowhere else; any text that
leaves this module (errors, logs) has it masked. Prompts and answer checks live in ``prompts`` and ``answers``.
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
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from whileai.errors import BadInput, GraderUnavailable
from whileai.judge.answers import JudgeAnswerError
from whileai.judge.cache import JudgeCache
from whileai.judge.config import JudgeConfig
from whileai.judge.prompts import Message
from whileai.judge.stats import JudgeStats

__all__ = [
    "CallSpec",
    "JudgeCallError",
    "JudgeClient",
    "MalformedResponse",
    "first_choice",
    "names_structured_output",
    "read_api_key",
]

log = logging.getLogger("whileai.judge")

_PLACEHOLDER_KEY = "EMPTY"  # what vLLM's own examples send when the server has no --api-key
_RETRY_STATUSES = frozenset({408, 409, 429})
# The forms of response_format, strongest first; "auto" steps down one form each time the server refuses one.
_FORMATS = ("json_schema", "json_object", "none")
# Words a server's error uses when it refuses structured output, e.g. llama.cpp's 500 'response_format type must be
# one of "text" or "json_object", but got: json_schema' and 400 'JSON schema conversion failed', vLLM's 400 'The
# provided JSON schema contains features not supported by xgrammar', Ollama's 500 'invalid JSON schema in format'.
_STRUCTURED_OUTPUT_WORDS = re.compile(
    r"response[_ ]?format|json[_ ]?schema|json[_ ]object|grammar|structured[_ ]outputs?|guided[_ ]", re.IGNORECASE
)


class JudgeCallError(RuntimeError):
    """A judge call that got no answer after its retries.

    Attributes:
        kind: ``"connection"``, ``"timeout"``, ``"deadline"``, ``"http <status>"``, ``"bad response"`` (a 200 that
            is no chat completion) or ``"error"``; the failure's reason in the stats.
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


def names_structured_output(text: str) -> bool:
    """Whether an error text names structured output (``response_format``, a JSON schema, a grammar).

    Example:
        >>> names_structured_output("response_format type must be one of text or json_object, but got: json_schema")
        True
        >>> names_structured_output("the request exceeds the available context size")
        False
    """
    return _STRUCTURED_OUTPUT_WORDS.search(text) is not None


@dataclass
class CallSpec:
    """One judge call to make.

    Attributes:
        kind: ``"rank"``, ``"rubric"`` or ``"score"`` (cache bookkeeping and the server's logs).
        messages: the chat messages.
        schema: the JSON schema sent in ``response_format`` while structured output is on.
        read: turns the reply's text into a checked, JSON-ready answer; raises ``JudgeAnswerError``.
        key: the cache key (model, prompt version and digest, kind, messages).
    """

    kind: str
    messages: list[Message]
    schema: dict[str, Any]
    read: Callable[[str | None], Any]
    key: str


def read_api_key(config: JudgeConfig) -> str:
    """The API key from the variable ``config.api_key_env`` names; a placeholder when it names none.

    Raises:
        BadInput: the variable is named but not set (the message names the variable, never a value).
    """
    if config.api_key_env is None:
        return _PLACEHOLDER_KEY
    key = os.environ.get(config.api_key_env, "")
    if not key:
        raise BadInput(
            f"judge.api_key_env names {config.api_key_env}, which is not set: export {config.api_key_env}=... "
            "or leave api_key_env out for a local server without a key"
        )
    return key


def _retry_after(response: Any) -> float | None:
    """Seconds a 429 or 503 asks to wait (``retry-after-ms``, ``retry-after`` in seconds or as an HTTP date)."""
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


class _LoopThread:
    """A daemon thread running one event loop, and what lives on it (the HTTP client, the semaphore)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="whileai-judge-loop", daemon=True)
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


@dataclass
class _Outcome:
    """What one spec's call came to."""

    answer: Any = None
    error: Exception | None = None
    cached: bool = False
    extras: dict[str, Any] = field(default_factory=dict)


class JudgeClient:
    """Judge calls against ``config.base_url``, sharing one connection pool, cache and ``JudgeStats``.

    The background loop and the HTTP client start on the first call (and again in a forked child); ``close()``
    stops them, as does garbage collection.
    """

    def __init__(self, config: JudgeConfig, stats: JudgeStats | None = None) -> None:
        self.config = config
        self.stats = stats if stats is not None else JudgeStats()
        self._format = "none"
        self._use_format("none" if config.structured_output == "off" else "json_schema")
        self._api_key = read_api_key(config)
        self.cache = None if config.no_cache else JudgeCache(config.cache_path())
        self._runtime: _LoopThread | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JudgeClient(base_url={self.config.base_url!r}, model={self.config.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a JudgeClient holds a connection pool and cannot be pickled; build one in each process")

    # ------------------------------------------------------------------ redaction

    def redact(self, text: str) -> str:
        """``text`` with the API key masked (a server may echo a request back in its error)."""
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
            runtime = _LoopThread()
            self._runtime = runtime
            if self._finalizer is not None:
                self._finalizer.detach()
            self._finalizer = weakref.finalize(self, runtime.stop)
            return runtime

    def close(self) -> None:
        """Stop the loop, close the connection pool and the cache; a later call starts them again."""
        with self._start_lock:
            if self._finalizer is not None:
                self._finalizer()
                self._finalizer = None
            self._runtime = None
        if self.cache is not None:
            self.cache.close()

    async def _ensure_http(self, runtime: _LoopThread) -> None:
        if runtime.http is None:
            import openai  # imported when a judge first calls, never by `import whileai`

            # One pool sized to the semaphore; idle connections are kept for a minute (httpx's default is 5 s),
            # so the next batch of a training run reuses them instead of opening `concurrency` new ones.
            limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
                max_connections=max(self.config.concurrency * 2, 16),
                max_keepalive_connections=self.config.concurrency,
                keepalive_expiry=60.0,
            )
            runtime.http = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.config.base_url,
                max_retries=0,
                timeout=self.config.timeout_s,
                http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=self.config.timeout_s),
            )
            runtime.semaphore = asyncio.Semaphore(self.config.concurrency)

    # ------------------------------------------------------------------ one call

    def _backoff(self, attempt: int) -> float:
        base = min(self.config.backoff_max_s, self.config.backoff_base_s * 2**attempt)
        return base * random.uniform(0.5, 1.0)

    # ------------------------------------------------------------------ structured output

    def _use_format(self, form: str) -> None:
        self._format = form
        self.stats.response_format = form
        self.stats.structured_output = form != "none"

    def _refused_format(self, sent: str, status: int, error: str) -> bool:
        """Whether an error status refuses the ``response_format`` form ``sent``; if so, step down from it.

        A 400 or 422 counts whatever it says (some servers reject the unknown field without naming it); a 5xx only
        when its text names structured output, otherwise it is an ordinary failure, retried. Calls in flight when
        the form changed were sent the stronger one: their refusal does not step again.
        """
        if self.config.structured_output != "auto" or sent == "none":
            return False
        if status not in (400, 422) and not (status >= 500 and names_structured_output(error)):
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

    # ------------------------------------------------------------------ one call

    def _request(self, spec: CallSpec, form: str) -> dict[str, Any]:
        """The body of one chat completion; ``form`` is the ``response_format`` to send (``"none"``: none)."""
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": spec.messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if form == "json_schema":
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": f"whileai_{spec.kind}", "schema": spec.schema},
            }
        elif form == "json_object":
            # "schema" beside the type is how llama.cpp and llama-cpp-python take a schema in JSON mode; vLLM
            # ignores the extra field and constrains to any JSON object.
            request["response_format"] = {"type": "json_object", "schema": spec.schema}
        request.update(self.config.extra_body)  # extra request fields, sent as they are
        return request

    async def _post(self, runtime: _LoopThread, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """POST one chat completion and return the response's JSON object.

        The request goes through the official client's ``post`` (its connection pool, auth, error classes and
        timeout) with a plain JSON body: ``chat.completions.create`` walks every request through its typed
        transform and builds a pydantic model of every response, about 4 ms of CPU per call, which at 64 calls in
        flight on a small CPU costs more than the judge's own latency (benchmarks/README.md, judge). The body is
        read as text and decoded here, so that an empty or cut one is told apart from any other error.

        Raises:
            MalformedResponse: a 200 whose body is empty, not JSON (cut short, or a proxy's HTML page) or not an
                object.
        """
        text = await runtime.http.post("/chat/completions", body=request, cast_to=str, options={"timeout": timeout})
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

    def _read_response(self, spec: CallSpec, response: dict[str, Any]) -> Any:
        choice = first_choice(response)
        text = choice["message"].get("content")
        finish = choice.get("finish_reason")
        if finish != "length" and (text is None or (isinstance(text, str) and not text.strip())):
            raise MalformedResponse("the message is empty")
        try:
            return spec.read(text)
        except JudgeAnswerError as exc:
            if finish == "length":
                raise JudgeAnswerError(f"the reply was cut at max_tokens={self.config.max_tokens}: {exc}") from None
            raise

    async def _ask(self, runtime: _LoopThread, spec: CallSpec, deadline: float) -> Any:
        import openai

        loop = asyncio.get_running_loop()
        attempt = 0
        retry = False  # a repeat after a failure; a re-ask in a weaker response_format is not one
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise JudgeCallError("the batch deadline passed before the call could be made", "deadline")
            wait_hint: float | None = None
            assert runtime.semaphore is not None
            async with runtime.semaphore:
                # The form is read once the call may go, so a call queued behind a refusal sends the weaker one.
                sent = self._format if spec.schema else "none"
                request = self._request(spec, sent)
                self.stats.count_call(retry=retry)
                started = time.perf_counter()
                timeout = min(self.config.timeout_s, remaining)
                response: dict[str, Any] = {}
                try:
                    response = await asyncio.wait_for(self._post(runtime, request, timeout), timeout=timeout)
                    answer = self._read_response(spec, response)
                except (asyncio.TimeoutError, openai.APITimeoutError):
                    if timeout < self.config.timeout_s:
                        raise JudgeCallError(f"the batch deadline passed after {timeout:.1f}s", "deadline") from None
                    error = JudgeCallError(f"no answer within timeout_s={self.config.timeout_s}", "timeout")
                    retryable = True
                except openai.APIConnectionError as exc:
                    error = JudgeCallError(f"connection error: {self.redact(str(exc))}", "connection")
                    retryable = True
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    text = _status_text(exc)
                    if self._refused_format(sent, status, text):
                        retry = False
                        continue  # ask again at once in the weaker form; no retry spent
                    message = " ".join(self.redact(text).split())[:300]
                    error = JudgeCallError(f"HTTP {status}: {message}", f"http {status}")
                    retryable = status in _RETRY_STATUSES or status >= 500
                    if status in (429, 503):
                        wait_hint = _retry_after(exc.response)
                except MalformedResponse as exc:
                    error = JudgeCallError(f"HTTP 200 but {self.redact(str(exc))}", "bad response")
                    retryable = True
                except JudgeAnswerError:  # an answer, just not a usable one: counted, and not retried
                    self._count_answer(started, response)
                    raise
                except Exception as exc:  # anything else the HTTP stack (or a reader) raises
                    message = self.redact(str(exc)).splitlines()[0][:300] if str(exc) else ""
                    error = JudgeCallError(f"{type(exc).__name__}: {message}", "error")
                    retryable = False
                else:
                    self._count_answer(started, response)
                    return answer
            if not retryable or attempt >= self.config.max_retries:
                if attempt:
                    error = JudgeCallError(f"{error} (after {attempt} retries)", error.kind)
                raise error
            delay = wait_hint if wait_hint is not None else self._backoff(attempt)
            if loop.time() + delay >= deadline:
                raise JudgeCallError(f"{error} (no time left before the batch deadline to retry)", error.kind)
            log.debug(
                "judge call %s failed (%s); retry %d/%d in %.2fs",
                spec.kind,
                error,
                attempt + 1,
                self.config.max_retries,
                delay,
            )
            await asyncio.sleep(delay)
            attempt += 1
            retry = True

    async def _ask_safely(self, runtime: _LoopThread, spec: CallSpec, deadline: float) -> _Outcome:
        try:
            return _Outcome(answer=await self._ask(runtime, spec, deadline))
        except JudgeCallError as exc:
            return _Outcome(error=exc)
        except JudgeAnswerError as exc:  # its message quotes the reply, which could quote anything
            return _Outcome(error=JudgeAnswerError(self.redact(str(exc))))
        except Exception as exc:  # a bug in a reader must not stop the batch
            text = self.redact(str(exc)).splitlines()[0][:300] if str(exc) else ""
            return _Outcome(error=JudgeCallError(f"{type(exc).__name__}: {text}", "error"))

    async def _ask_all(self, runtime: _LoopThread, specs: list[CallSpec]) -> list[_Outcome]:
        await self._ensure_http(runtime)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.batch_deadline_s
        tasks = [asyncio.ensure_future(self._ask_safely(runtime, spec, deadline)) for spec in specs]
        _, pending = await asyncio.wait(tasks, timeout=self.config.batch_deadline_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        late = JudgeCallError(f"cancelled at the batch deadline ({self.config.batch_deadline_s}s)", "deadline")
        return [_Outcome(error=late) if task in pending else task.result() for task in tasks]

    # ------------------------------------------------------------------ a batch

    def run(self, specs: list[CallSpec]) -> list[_Outcome]:
        """Every spec's answer (from the cache or the server) or the exception standing in for it, in order.

        Raises:
            GraderUnavailable: no spec got an answer, every call having failed after its retries (the server is
                down, refuses, times out, or answers only errors).
        """
        if not specs:
            return []
        outcomes: list[_Outcome | None] = [None] * len(specs)
        if self.cache is not None:
            hits = self.cache.get_many(list({s.key for s in specs}))
            for i, spec in enumerate(specs):
                if spec.key in hits:
                    outcomes[i] = _Outcome(answer=hits[spec.key], cached=True)
                    self.stats.count_cache_hit()
        todo = [i for i, outcome in enumerate(outcomes) if outcome is None]
        if todo:
            runtime = self._start()
            future = asyncio.run_coroutine_threadsafe(self._ask_all(runtime, [specs[i] for i in todo]), runtime.loop)
            try:
                asked = future.result(timeout=self.config.batch_deadline_s + 30)
            except concurrent.futures.TimeoutError:  # the loop itself is stuck; never block training forever
                future.cancel()
                stuck = JudgeCallError("the judge's event loop did not finish the batch", "deadline")
                asked = [_Outcome(error=stuck) for _ in todo]
            for i, outcome in zip(todo, asked, strict=True):
                outcomes[i] = outcome
                if outcome.error is None and self.cache is not None:
                    self.cache.put(specs[i].key, specs[i].kind, outcome.answer)
        done = [o for o in outcomes if o is not None]
        if all(isinstance(o.error, JudgeCallError) for o in done):
            first = done[0].error
            raise GraderUnavailable(
                f"judge at {self.config.base_url} (model {self.config.model}) answered none of {len(done)} "
                f"call(s): {first}"
            )
        return done
