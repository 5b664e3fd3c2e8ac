"""``EndpointClient``: the calls of ``whileai.endpoint`` made over HTTP, concurrent, retried and bounded by a deadline,
behind a synchronous method (see ``whileai.endpoint`` for what a call is and how it is retried).

One HTTP client (one connection pool) runs on one long-lived event loop in a background thread, so ``run(calls)`` is
a plain synchronous method that works from any thread, including one whose own event loop is running (TRL's), and
from several threads at once. For a plain ``http://`` server reached without a proxy (a local vLLM, llama.cpp,
Ollama: the judge's usual place) the transport is this module's own HTTP/1.1 on asyncio's streams, at about a tenth
of the CPU per call of the alternative; for ``https://`` or through a proxy it is an ``openai.AsyncOpenAI`` client.

A module of its own so that the settings in ``whileai.endpoint``, which the recipe schema reads, do not bring asyncio,
urllib's proxy handling and ssl into every command (the spread gate with a scripted rule never makes a call).
Importing it does not import ``openai``: the HTTP client is built on the first call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import random
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Sequence
from typing import Any

from whileai.endpoint import (
    _PLACEHOLDER_KEY,
    _RETRY_STATUSES,
    Call,
    CallError,
    EndpointSettings,
    EndpointStats,
    MalformedResponse,
    Outcome,
    _status_text,
    read_api_key,
    retry_after,
)

__all__ = ["EndpointClient"]

log = logging.getLogger("whileai.endpoint")


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
