"""``EndpointClient``: the calls of ``whileai.http.endpoint`` made over HTTP, concurrent, retried and bounded by a
deadline, behind a synchronous method (see ``whileai.http.endpoint`` for what a call is and how it is retried).

One aiohttp session (one connection pool) runs on one long-lived event loop in a background thread, so
``run(calls)`` is a plain synchronous method that works from any thread, including one whose own event loop is
running (TRL's), and from several threads at once. Every URL goes through that one session
(``whileai.http.transport.Transport``), ``http://`` and ``https://``, direct or through a proxy:

- proxies come from the environment as httpx (and so the openai SDK) reads them (``whileai.http.proxies.proxy_for``:
  ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY`` with its domain-suffix rules);
- compressed replies are decoded; a host name's addresses are tried in turn, the next one 250 ms after the last
  (happy eyeballs), so one address that drops connection attempts does not fail every call;
- a new connection has ``timeout_s`` to open (TCP and TLS), streamed call or not;
- idle connections are kept for a minute; a request whose kept connection died before any reply came, or brought a
  ``408`` (the server timed it out as the request went out), is sent again once at once on a new connection, counted
  as ``resent``, not as a retry;
- a reply whose HTTP framing is broken fails once (``bad framing``): a resend would cost the server a whole generation
  for the same reply;
- a server's ``Retry-After`` is honoured up to ``backoff_max_s``; each retry and its wait is logged at INFO
  (``whileai spread --verbose`` shows them);
- redirects are followed within the same origin (a load balancer's ``307``); one to another host or scheme is an
  error that names the URL to set; a reply over ``whileai.http.transport.RESPONSE_LIMIT_BYTES`` is an error too;
- ``user:password@`` in the base URL becomes an ``Authorization: Basic`` header, and every request goes to the URL
  without it; the password, its token, the API key and a proxy's password make the client's ``SecretFilter``, which
  the transport runs every text from the server through.

A module of its own so that the settings in ``whileai.http.endpoint``, which the recipe schema reads, do not bring
asyncio and ssl into every command (the spread gate with a scripted rule never makes a call). Importing it does not
import ``aiohttp``: the session is built on the first call."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from whileai.defaults import CHAT_CONCURRENCY
from whileai.errors import BadInput
from whileai.http.endpoint import (
    RETRY_STATUSES,
    Call,
    CallError,
    EndpointSettings,
    EndpointStats,
    MalformedResponse,
    Outcome,
    retry_after,
)
from whileai.http.proxies import proxy_for
from whileai.http.secrets import PLACEHOLDER_KEY, SecretFilter, query_secrets, read_api_key, split_credentials
from whileai.http.transport import ConnectionLost, Dropped, Refused, Silent, StatusError, Transport

__all__ = ["EndpointClient"]

log = logging.getLogger("whileai.http.endpoint")


class _SendAgain(Exception):
    """The call goes again at once, no retry spent; ``fresh``: on a new connection."""

    def __init__(self, fresh: bool = False) -> None:
        super().__init__()
        self.fresh = fresh


class _Failed(Exception):
    """What one attempt of a call ended in, whether a retry may mend it, and how long the server asked to wait."""

    def __init__(self, error: CallError, retryable: bool = True, wait_s: float | None = None) -> None:
        super().__init__(str(error))
        self.error, self.retryable, self.wait_s = error, retryable, wait_s


class _LoopThread:
    """A daemon thread running one event loop, and what lives on it (the transport, the semaphore)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=f"whileai-{name}-loop", daemon=True)
        self.http: Transport | None = None
        self.semaphore: asyncio.Semaphore | None = None
        self.pid = os.getpid()
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _shutdown(self) -> None:
        # A batch still in flight (its caller stopped by Ctrl-C) is cancelled before its session closes: a task
        # left pending would print its traceback when the interpreter exits.
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self.http is not None:
            await self.http.close()

    def stop(self) -> None:
        """Cancel what is in flight, close the session and stop the loop (a no-op in a forked child, which does not
        own them)."""
        if self.pid != os.getpid() or self.loop.is_closed():
            return
        if self.thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(timeout=5)
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
        concurrency: calls in flight at once when ``settings.concurrency`` leaves it to the client (the judge's
            figure for its server); ``CHAT_CONCURRENCY`` when neither says.

    Raises:
        BadInput: ``settings.api_key_env`` names a variable that is not set or whose value holds a control
            character, or the base URL holds a user and password as well as naming a key variable.

    The background loop and the session start on the first call (and again in a forked child); ``close()`` stops
    them, as does garbage collection.
    """

    def __init__(
        self,
        settings: EndpointSettings,
        stats: EndpointStats | None = None,
        *,
        name: str = "endpoint",
        concurrency: int | None = None,
    ) -> None:
        self.settings = settings
        self.concurrency = settings.concurrency or concurrency or CHAT_CONCURRENCY
        self.stats = stats if stats is not None else EndpointStats()
        self.name = name
        self._api_key = read_api_key(settings.api_key_env, field=f"{name}.api_key_env")
        self.url, credentials = split_credentials(settings.base_url)
        secrets = [self._api_key] if self._api_key != PLACEHOLDER_KEY else []
        secrets += query_secrets(settings.base_url)  # a key given as ?api_key=... the server may echo too
        if credentials is not None:
            if settings.api_key_env is not None:
                raise BadInput(
                    f"{name}.base_url holds a user and password and {name}.api_key_env names a key: the server gets "
                    "one Authorization header; keep one of them"
                )
            token = base64.b64encode(credentials.encode()).decode()
            self._authorization = f"Basic {token}"
            user, _, password = credentials.partition(":")
            secrets += [token, credentials, password, *([user] if not password else [])]  # a token as the user
        else:
            self._authorization = f"Bearer {self._api_key}"
        # The proxy the environment gives this server (a SOCKS one is refused here, naming its variable); a server
        # or the proxy may echo its password too.
        proxy = proxy_for(self.url)
        if proxy is not None and (proxy_credentials := split_credentials(proxy)[1]) is not None:
            secrets += [proxy_credentials, proxy_credentials.partition(":")[2]]
            secrets.append(base64.b64encode(proxy_credentials.encode()).decode())
        self.secrets = SecretFilter(secrets)
        self._runtime: _LoopThread | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EndpointClient(name={self.name!r}, base_url={self.url!r}, model={self.settings.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an EndpointClient holds a connection pool and cannot be pickled; build one in each process")

    def shown(self, text: str, limit: int = 300) -> str:
        """``text`` on one line, cut to ``limit`` characters: what a message may quote of a reply. What came from the
        server was cleaned of every secret where it came in (the transport); a text of another source (an
        exception a reader raised) is cleaned here, before the cut."""
        return " ".join(self.secrets.clean(text).split())[:limit]

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
        if runtime.http is None:
            runtime.http = Transport(self.url, self._authorization, self.secrets, self.settings.timeout_s)
        if runtime.semaphore is None:
            runtime.semaphore = asyncio.Semaphore(self.concurrency)

    # ------------------------------------------------------------------ one call

    def _backoff(self, attempt: int) -> float:
        base = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2**attempt)
        return base * random.uniform(0.5, 1.0)

    def _count_answer(self, started: float, response: dict[str, Any], streamed: int = 0) -> None:
        """Count an answered request; ``streamed`` pieces were counted as completion tokens as they came, and the
        server's usage, where it reports one, replaces that estimate."""
        usage = response.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        tokens_out = int(usage.get("completion_tokens") or 0)
        self.stats.count_answer(
            time.perf_counter() - started,
            int(usage.get("prompt_tokens") or 0),
            tokens_out - streamed if tokens_out else 0,
        )

    def get(self, url: str, timeout_s: float = 5.0) -> tuple[int, str] | None:
        """GET ``url`` (any path of the server, e.g. llama.cpp's ``/props``) on the client's session: its status
        and text, or None when nothing readable came within ``timeout_s``."""
        runtime = self._start()

        async def fetch() -> tuple[int, str] | None:
            await self._ensure_http(runtime)
            assert runtime.http is not None
            return await runtime.http.get(url, timeout_s)

        future = asyncio.run_coroutine_threadsafe(fetch(), runtime.loop)
        try:
            return future.result(timeout=timeout_s + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return None

    def set_concurrency(self, concurrency: int) -> None:
        """Allow ``concurrency`` calls in flight from the next batch on (the server's own figure, once known)."""
        self.concurrency = max(1, int(concurrency))
        if self._runtime is not None:
            self._runtime.semaphore = None

    async def _ask(self, runtime: _LoopThread, call: Call) -> Any:
        """``call``'s answer, sent until it is answered, retried with backoff while its errors are retryable."""
        settings = self.settings
        loop = asyncio.get_running_loop()
        attempt = 0
        retry = False  # a repeat after a failure; a call sent again after a refused form is not one
        fresh = False  # this send goes on a new connection: the one free resend after a kept connection failed it
        resent = False
        # The deadline counts from the call's first slot: time spent queued behind the concurrency limit is this
        # client's doing, not the server's, so a batch larger than the server's slots is not cut short by it.
        deadline: float | None = None
        while True:
            if deadline is not None and deadline - loop.time() <= 0:
                raise CallError("the batch deadline passed before the call could be made", "deadline")
            assert runtime.semaphore is not None
            async with runtime.semaphore:
                if deadline is None:
                    deadline = loop.time() + settings.batch_deadline_s
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise CallError("the batch deadline passed before the call could be made", "deadline")
                try:
                    return await self._attempt(runtime, call, remaining, retry, fresh, may_resend=not resent)
                except _SendAgain as again:
                    retry, fresh, resent = False, again.fresh, resent or again.fresh
                    continue
                except _Failed as failed:
                    error, retryable, wait_hint = failed.error, failed.retryable, failed.wait_s
                fresh = False
            if not retryable or attempt >= settings.max_retries:
                if attempt:
                    error = CallError(f"{error} (after {attempt} retries)", error.kind)
                raise error
            # A server's Retry-After is honoured up to backoff_max_s, as any other wait between retries is.
            delay = self._backoff(attempt) if wait_hint is None else min(wait_hint, settings.backoff_max_s)
            if loop.time() + delay >= deadline:
                raise CallError(f"{error} (no time left before the batch deadline to retry)", error.kind)
            asked = "" if wait_hint is None else f", the server asked for {wait_hint:g}s (backoff_max_s caps it)"
            log.info(
                "%s call %s failed (%s); retry %d/%d in %.2fs%s", self.name, call.name, error, attempt + 1,
                settings.max_retries, delay, asked,
            )  # fmt: skip
            await asyncio.sleep(delay)
            attempt += 1
            retry = True

    async def _attempt(
        self, runtime: _LoopThread, call: Call, remaining: float, retry: bool, fresh: bool, *, may_resend: bool
    ) -> Any:
        """One send of ``call`` within ``remaining`` seconds (on a new connection when ``fresh``): its answer.

        Raises:
            _SendAgain: send it again at once, no retry spent: in the form a refusal asked for, or once on a new
                connection after a kept one died before any reply or brought a 408 (a server times out an idle
                connection with a 408 that can meet the next request on the way).
            _Failed: the error this attempt ended in, and whether a retry may mend it.
            CallError: an error no retry can mend (the deadline, a refused redirect or size).
            call.unusable: an answer that came back but cannot be used (counted, not retried).
        """
        settings = self.settings
        # The body is built once the call may go, so a call queued behind a refusal sends the new form.
        request = call.body()
        self.stats.count_call(retry=retry, resent=fresh)
        started = time.perf_counter()
        # A streamed call may take as long as the batch allows while pieces keep coming; timeout_s bounds the
        # silence between them. An unstreamed one has timeout_s for the whole answer.
        streaming = bool(request.get("stream"))
        timeout = remaining if streaming else min(settings.timeout_s, remaining)
        streamed = [0]

        def piece(counter: list[int] = streamed) -> None:
            counter[0] += 1
            self.stats.count_streamed(1)

        response: dict[str, Any] = {}
        try:
            assert runtime.http is not None
            silence = settings.timeout_s if streaming else None
            post = runtime.http.post("/chat/completions", request, silence, piece, fresh=fresh)
            response = await asyncio.wait_for(post, timeout=timeout)
            answer = call.read(response)
        except asyncio.TimeoutError:
            if streaming or timeout < settings.timeout_s:
                raise CallError(f"the batch deadline passed after {timeout:.1f}s", "deadline") from None
            raise _Failed(CallError(f"no answer within timeout_s={settings.timeout_s}", "timeout")) from None
        except Silent:
            quiet = f"no answer within timeout_s={settings.timeout_s} (the server sent nothing for that long)"
            raise _Failed(CallError(quiet, "timeout")) from None
        except Dropped as exc:
            if may_resend:  # a kept connection that died: once more on a new one, no backoff
                raise _SendAgain(fresh=True) from None
            raise _Failed(CallError(f"connection error: {self.shown(str(exc))}", "connection")) from None
        except ConnectionLost as exc:
            raise _Failed(CallError(f"connection error: {self.shown(str(exc))}", "connection")) from None
        except Refused as exc:
            raise CallError(self.shown(str(exc)), exc.kind) from None
        except StatusError as exc:
            status = exc.status
            if call.refused is not None and call.refused(status, exc.text):
                raise _SendAgain() from None  # at once in the new form
            if status == 408 and may_resend:
                raise _SendAgain(fresh=True) from None
            error = CallError(f"HTTP {status}: {self.shown(exc.text)}", f"http {status}")
            wait = retry_after(exc.headers) if status in (429, 503) else None
            raise _Failed(error, status in RETRY_STATUSES or status >= 500, wait) from None
        except MalformedResponse as exc:
            raise _Failed(CallError(f"HTTP 200 but {self.shown(str(exc))}", "bad response")) from None
        except call.unusable:  # an answer, just not a usable one: counted, and not retried
            self._count_answer(started, response, streamed[0])
            raise
        except Exception as exc:  # anything else a reader raises
            error = CallError(f"{type(exc).__name__}: {self.shown(str(exc))}".rstrip(": "), "error")
            raise _Failed(error, retryable=False) from None
        self._count_answer(started, response, streamed[0])
        return answer

    async def _ask_safely(self, runtime: _LoopThread, call: Call) -> Outcome:
        try:
            return Outcome(answer=await self._ask(runtime, call))
        except CallError as exc:
            return Outcome(error=exc)
        except call.unusable as exc:  # its message quotes the reply, which could quote anything
            return Outcome(error=type(exc)(self.shown(str(exc))))
        except Exception as exc:  # a bug in a reader must not stop the batch
            return Outcome(error=CallError(f"{type(exc).__name__}: {self.shown(str(exc))}".rstrip(": "), "error"))

    def _batch_limit(self, calls: int) -> float:
        """The longest a batch of ``calls`` can take: a deadline per wave of ``concurrency`` calls."""
        waves = -(-calls // self.concurrency)
        return waves * self.settings.batch_deadline_s

    async def _ask_all(self, runtime: _LoopThread, calls: Sequence[Call]) -> list[Outcome]:
        await self._ensure_http(runtime)
        tasks = [asyncio.ensure_future(self._ask_safely(runtime, call)) for call in calls]
        # Each call keeps its own deadline; this bound only guards against a call that ignores its own.
        _, pending = await asyncio.wait(tasks, timeout=self._batch_limit(len(calls)) + 1)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        late = CallError(f"cancelled at the batch deadline ({self.settings.batch_deadline_s}s)", "deadline")
        return [Outcome(error=late) if task in pending else task.result() for task in tasks]

    # ------------------------------------------------------------------ a batch

    def run(self, calls: Sequence[Call]) -> list[Outcome]:
        """Every call's answer or the exception standing in for it, in order; all of them in flight at once (up to
        ``concurrency``), each within ``batch_deadline_s`` of being sent. Never raises for a failed call."""
        if not calls:
            return []
        runtime = self._start()
        future = asyncio.run_coroutine_threadsafe(self._ask_all(runtime, calls), runtime.loop)
        try:
            return future.result(timeout=self._batch_limit(len(calls)) + 30)
        except concurrent.futures.TimeoutError:  # the loop itself is stuck; never block a caller forever
            future.cancel()
            stuck = CallError(f"the {self.name}'s event loop did not finish the batch", "deadline")
            return [Outcome(error=stuck) for _ in calls]
