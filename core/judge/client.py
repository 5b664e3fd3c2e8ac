"""``JudgeClient``: judge calls over HTTP, concurrent, retried, cached and bounded by a deadline, behind a sync method.

One ``openai.AsyncOpenAI`` client (one connection pool) runs on one long-lived event loop in a background thread,
so ``run(specs)`` is a plain synchronous method that works from any thread, including one whose own event loop is
running (TRL's). A batch's calls run concurrently under a semaphore (``concurrency``). Each call has a wall-clock
timeout; connection errors, timeouts, 408, 409, 429 (honouring ``Retry-After``) and 5xx are retried with
exponential backoff and jitter; calls still running at the batch deadline are cancelled. A reply is parsed and
checked by the spec's ``read`` before it counts as an answer; the checked answer is stored in the cache.

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
import logging
import os
import random
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

__all__ = ["CallSpec", "JudgeCallError", "JudgeClient", "read_api_key"]

log = logging.getLogger("whileai.judge")

_PLACEHOLDER_KEY = "EMPTY"  # what vLLM's own examples send when the server has no --api-key
_RETRY_STATUSES = frozenset({408, 409, 429})


class JudgeCallError(RuntimeError):
    """A judge call that got no answer after its retries.

    Attributes:
        kind: ``"connection"``, ``"timeout"``, ``"deadline"``, ``"http <status>"`` or ``"error"``; the failure's
            reason in the stats.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class CallSpec:
    """One judge call to make.

    Attributes:
        kind: ``"rank"``, ``"rubric"`` or ``"score"`` (cache bookkeeping and the server's logs).
        messages: the chat messages.
        schema: the JSON schema sent as ``response_format`` when structured output is on.
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
        self.stats.structured_output = config.structured_output != "off"
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

    async def _create(self, runtime: _LoopThread, spec: CallSpec, timeout: float) -> Any:
        """POST one chat completion and return the response's JSON.

        The request goes through the official client's ``post`` (its connection pool, auth, error classes and
        timeout) with a plain JSON body: ``chat.completions.create`` walks every request through its typed
        transform and builds a pydantic model of every response, about 4 ms of CPU per call, which at 64 calls in
        flight on a small CPU costs more than the judge's own latency (benchmarks/README.md, judge).
        """
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": spec.messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if self.stats.structured_output and spec.schema:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": f"whileai_{spec.kind}", "schema": spec.schema},
            }
        request.update(self.config.extra_body)  # extra request fields, sent as they are
        return await runtime.http.post("/chat/completions", body=request, cast_to=object, options={"timeout": timeout})

    def _read_response(self, spec: CallSpec, response: Any) -> Any:
        try:
            choice = response["choices"][0]
            text = choice["message"].get("content")
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise JudgeAnswerError("the server's response is not a chat completion") from None
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
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise JudgeCallError("the batch deadline passed before the call could be made", "deadline")
            wait_hint: float | None = None
            assert runtime.semaphore is not None
            async with runtime.semaphore:
                self.stats.count_call(retry=attempt > 0)
                started = time.perf_counter()
                timeout = min(self.config.timeout_s, remaining)
                try:
                    response = await asyncio.wait_for(self._create(runtime, spec, timeout), timeout=timeout)
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
                    if (
                        status in (400, 422)
                        and self.config.structured_output == "auto"
                        and self.stats.structured_output
                        and spec.schema
                    ):
                        # The server does not take response_format: drop it for the rest of the run, ask again.
                        self.stats.structured_output = False
                        log.info(
                            "judge %s rejected response_format (HTTP %s); parsing plain JSON from now on",
                            self.config.base_url,
                            status,
                        )
                        continue
                    message = " ".join(self.redact(str(exc)).split())[:300]
                    error = JudgeCallError(f"HTTP {status}: {message}", f"http {status}")
                    retryable = status in _RETRY_STATUSES or status >= 500
                    if status in (429, 503):
                        wait_hint = _retry_after(exc.response)
                except Exception as exc:  # anything else the HTTP stack raises
                    message = self.redact(str(exc)).splitlines()[0][:300] if str(exc) else ""
                    error = JudgeCallError(f"{type(exc).__name__}: {message}", "error")
                    retryable = False
                else:
                    usage = response.get("usage") if isinstance(response, dict) else None
                    usage = usage if isinstance(usage, dict) else {}
                    self.stats.count_answer(
                        time.perf_counter() - started,
                        int(usage.get("prompt_tokens") or 0),
                        int(usage.get("completion_tokens") or 0),
                    )
                    return self._read_response(spec, response)
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
