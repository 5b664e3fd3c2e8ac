"""``EndpointClient``: the calls of ``whileai.endpoint`` made over HTTP, concurrent, retried and bounded by a deadline,
behind a synchronous method (see ``whileai.endpoint`` for what a call is and how it is retried).

One aiohttp session (one connection pool) runs on one long-lived event loop in a background thread, so
``run(calls)`` is a plain synchronous method that works from any thread, including one whose own event loop is
running (TRL's), and from several threads at once. Every URL goes through that one session, ``http://`` and
``https://``, direct or through a proxy:

- proxies come from the environment as httpx (and so the openai SDK) reads them (:func:`proxy_for`:
  ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY`` with its domain-suffix rules);
- compressed replies are decoded; a host name's addresses are tried in turn, the next one 250 ms after the last
  (happy eyeballs), so one address that drops connection attempts does not fail every call;
- idle connections are kept for a minute; one the server closed (uvicorn after 5 s, a ``408`` before closing) leaves
  the pool with anything it sent, and a request whose connection died before any reply came is sent again once, on
  a fresh connection, counted as a retry;
- redirects are followed within the same origin (a load balancer's ``307``); one to another host or scheme is an
  error that names the URL to set; a reply over ``RESPONSE_LIMIT_BYTES`` is an error too;
- ``user:password@`` in the base URL becomes an ``Authorization: Basic`` header; the password, like the API key, is
  masked in every text that leaves the client, before anything is cut.

A module of its own so that the settings in ``whileai.endpoint``, which the recipe schema reads, do not bring asyncio
and ssl into every command (the spread gate with a scripted rule never makes a call). Importing it does not import
``aiohttp``: the session is built on the first call.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import ipaddress
import json
import logging
import os
import random
import threading
import time
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Mapping, Sequence
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
    read_api_key,
    retry_after,
    split_credentials,
)
from whileai.errors import BadInput

__all__ = ["RESPONSE_LIMIT_BYTES", "EndpointClient", "proxy_for"]

log = logging.getLogger("whileai.endpoint")

# The largest reply read: a judge's answer is a few kilobytes, and a server that streams without end must not take
# the process's memory with it.
RESPONSE_LIMIT_BYTES = 64 * 2**20

# Hops of a redirect chain followed within one origin.
_MAX_REDIRECTS = 5

# How long an idle pooled connection is kept: the next batch of a training run reuses it (a step is seconds to
# minutes apart; servers close idle connections on their own clock, which the pool notices).
_KEEPALIVE_S = 60.0


# ---------------------------------------------------------------------------------------------- proxies


def _split_port(entry: str) -> tuple[str, int | None]:
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and host and not host.endswith(":"):
        return host, int(port)
    return entry, None


def _host_matches(pattern: str, host: str) -> bool:
    """A ``NO_PROXY`` host entry against a host name, as httpx reads it: ``example.com`` and ``*example.com`` match
    the name and its subdomains, ``.example.com`` and ``*.example.com`` its subdomains only, an IP or
    ``localhost`` itself only, an IP network (``10.0.0.0/8``) its addresses."""
    host = host.lower().strip("[]")
    pattern = pattern.lower()
    if "/" in pattern:  # an address network
        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(pattern.strip("[]"), strict=False)
        except ValueError:
            return False
    bare = pattern.strip("[]")
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        pass
    else:
        return host == bare
    if pattern == "localhost":
        return host == "localhost"
    if pattern.startswith("*."):
        pattern = pattern[1:]
    if pattern.startswith("."):
        return host.endswith(pattern) and len(host) > len(pattern)
    domain = pattern.lstrip("*")
    return host == domain or host.endswith("." + domain)


def _bypassed(entry: str, scheme: str, host: str, port: int | None) -> bool:
    """Whether one ``NO_PROXY`` entry sends ``scheme://host:port`` direct."""
    if "://" in entry:
        parts = urllib.parse.urlsplit(entry)
        if parts.scheme not in ("all", scheme):
            return False
        try:
            wanted_port = parts.port
        except ValueError:
            return False
        if wanted_port is not None and wanted_port != port:
            return False
        return not parts.hostname or _host_matches(parts.hostname, host)
    if entry.startswith("[") or "/" in entry or entry.count(":") > 1:  # an IPv6 address or a network: no port
        return _host_matches(entry, host)
    name, wanted = _split_port(entry)
    return (wanted is None or wanted == port) and _host_matches(name, host)


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy the environment gives ``url``, read as httpx (and so the openai SDK) reads it; None: direct.

    ``HTTPS_PROXY`` or ``HTTP_PROXY`` for the URL's scheme, else ``ALL_PROXY`` (lower-case names win, a proxy without
    a scheme is ``http://``), unless a ``NO_PROXY`` entry matches (``*`` matches everything).

    Example:
        >>> env = {"http_proxy": "proxy:3128", "no_proxy": ".internal,10.0.0.0/8"}
        >>> proxy_for("http://judge.internal/v1", env), proxy_for("http://internal/v1", env)
        (None, 'http://proxy:3128')
    """
    if environ is None:
        proxies = urllib.request.getproxies_environment()
    else:
        proxies = {}
        for name, value in sorted(environ.items(), key=lambda item: item[0].islower()):  # lower-case last: it wins
            if value and name.lower().endswith("_proxy"):
                proxies[name.lower()[: -len("_proxy")]] = value
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme, parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    for entry in (e.strip() for e in proxies.get("no", "").split(",")):
        if entry == "*":
            return None
        if entry and _bypassed(entry, scheme, host, port):
            return None
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy:
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


# ---------------------------------------------------------------------------------------------- the transport


class _StatusError(Exception):
    """An error status from the server: its code, its body's text and its headers (lower-case names)."""

    def __init__(self, status: int, text: str, headers: Mapping[str, str]) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers


class _ConnectionLost(Exception):
    """No answer because of the connection: refused, reset, closed before the reply was whole, a proxy that failed."""


class _Dropped(_ConnectionLost):
    """The connection died before any byte of the reply came: the request can go again on a fresh one."""


class _Refused(Exception):
    """A reply that no retry can mend: a redirect out of the origin, a body over the size limit."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _origin(url: Any) -> tuple[str, str, int | None]:
    return (url.scheme, (url.host or "").lower(), url.port)


def _text(raw: bytes, charset: str | None) -> str:
    """A body's text in its declared charset (UTF-8 when it declares none, or one Python does not know)."""
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")


class _Silent(Exception):
    """The server sent nothing for the call's ``timeout_s``."""


async def _read_events(response: Any, on_piece: Callable[[], None] | None = None) -> dict[str, Any]:
    """The chat completion a streamed reply adds up to: the content of its deltas, the last finish reason, the
    usage of its last chunk (``stream_options.include_usage``), in the shape of an unstreamed reply. ``on_piece``
    is called for each piece of content as it comes (about one token each on vLLM and llama.cpp).

    Raises:
        MalformedResponse: an event that is not JSON, or one that carries an error (vLLM reports a failure met
            mid-answer that way).
        _ConnectionLost: the stream ended before ``[DONE]`` or a finish reason.
        _Refused: more than the reply limit.
    """
    content: list[str] = []
    finish: str | None = None
    usage: Any = None
    model: Any = None
    buffer = b""
    size = 0
    done = False
    while not done and (chunk := await response.content.readany()):
        size += len(chunk)
        if size > RESPONSE_LIMIT_BYTES:
            raise _Refused(f"the reply is over the {RESPONSE_LIMIT_BYTES} byte limit", "too large")
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # a comment (": keep-alive"), an event name, a blank line between events
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                event = json.loads(data)
            except ValueError:
                raise MalformedResponse(f"a stream event is not JSON: {data[:80]!r}") from None
            if not isinstance(event, dict):
                raise MalformedResponse("a stream event is not a JSON object")
            if event.get("error"):
                raise MalformedResponse(f"the stream carries an error: {event['error']}")
            usage = event.get("usage") or usage
            model = event.get("model") or model
            for choice in event.get("choices") or []:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                piece = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(piece, str) and piece:
                    content.append(piece)
                    if on_piece is not None:
                        on_piece()
                finish = choice.get("finish_reason") or finish
    if not done and finish is None:
        raise _ConnectionLost("the stream ended before the answer was whole")
    message = {"role": "assistant", "content": "".join(content)}
    return {"model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


class _Transport:
    """Chat-completion POSTs on one aiohttp session: auth headers, the proxy of each URL, same-origin redirects, the
    size limit, and aiohttp's errors turned into this module's three."""

    def __init__(self, base_url: str, authorization: str, concurrency: int) -> None:
        import aiohttp  # imported on the first call, never by `import whileai`
        import yarl

        self.aiohttp, self.yarl = aiohttp, yarl
        self.base_url = base_url
        self.headers = {"Authorization": authorization, "Accept": "application/json", "User-Agent": "whileai"}
        connector = aiohttp.TCPConnector(
            limit=max(concurrency, 1),
            limit_per_host=0,
            keepalive_timeout=_KEEPALIVE_S,
            happy_eyeballs_delay=0.25,
            ttl_dns_cache=60,
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=None),  # the call's own timeout bounds it
            trust_env=False,  # proxies are proxy_for's, read as httpx reads them
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
        )

    async def post(
        self,
        path: str,
        request: dict[str, Any],
        silence_s: float | None = None,
        on_piece: Callable[[], None] | None = None,
    ) -> str | dict[str, Any]:
        """POST ``request`` as JSON: the body's text, or for a streamed reply (``text/event-stream``) the chat
        completion its events add up to (``on_piece`` called for each piece of content).

        ``silence_s`` bounds each wait for the next piece of a reply; None waits as long as the caller does. A reply
        given up (cancelled, too large, silent, unreadable) closes its connection, so the server sees the request go
        and stops working on it.

        Raises:
            _StatusError: a status >= 300 that is no same-origin redirect.
            _Dropped, _ConnectionLost: no whole reply.
            _Silent: nothing came for ``silence_s`` seconds.
            _Refused: a redirect to another origin, too many redirects, a body over the limit.
            MalformedResponse: a stream that carries an error or is no chat completion.
        """
        aiohttp = self.aiohttp
        body = json.dumps(request, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        url = self.yarl.URL(self.base_url + path)
        headers = {**self.headers, "Content-Type": "application/json"}
        # sock_read: the longest wait for the next bytes from the server, the reply's head included.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=None, sock_read=silence_s)
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                async with self.session.post(
                    url, data=body, headers=headers, proxy=proxy_for(str(url)), allow_redirects=False, timeout=timeout
                ) as response:
                    location = response.headers.get("Location")
                    if 300 <= response.status < 400 and location:
                        target = url.join(self.yarl.URL(location))
                        if _origin(target) != _origin(url):
                            raise _Refused(
                                f"HTTP {response.status}: the server redirects to {target}, another origin; set "
                                "base_url to the server's own address",
                                f"http {response.status}",
                            )
                        url = target
                        continue
                    try:
                        if response.status < 300 and response.content_type == "text/event-stream":
                            return await _read_events(response, on_piece)
                        text = _text(await self._read(response), response.charset)
                    except BaseException:
                        response.close()  # not back to the pool: the server must see the request go
                        raise
                    if response.status >= 300:
                        raise _StatusError(response.status, text, {k.lower(): v for k, v in response.headers.items()})
                    return text
            except aiohttp.ServerTimeoutError:  # sock_read: the server went silent
                raise _Silent(f"the server sent nothing for {silence_s:g}s") from None
            except aiohttp.ClientConnectorError as exc:  # no connection at all (a proxy's included)
                raise _ConnectionLost(f"cannot connect to {exc.host}:{exc.port}: {exc.os_error}") from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:  # closed or reset before a reply
                raise _Dropped(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
            except aiohttp.ClientResponseError as exc:  # a reply that is not HTTP, or a proxy that refused
                raise _ConnectionLost(f"{type(exc).__name__}: {exc.status} {exc.message}") from None
            except aiohttp.ClientError as exc:  # a reply cut short, and the rest of aiohttp's
                raise _ConnectionLost(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        raise _Refused(f"more than {_MAX_REDIRECTS} redirects from {self.base_url}", "redirects")

    async def get(self, url: str, timeout_s: float) -> tuple[int, str] | None:
        """GET ``url``: its status and text, or None when it could not be read within ``timeout_s``."""

        async def read() -> tuple[int, str]:
            async with self.session.get(
                url, headers={**self.headers, "Accept": "*/*"}, proxy=proxy_for(url), allow_redirects=False
            ) as response:
                return response.status, _text(await self._read(response), response.charset)

        try:
            return await asyncio.wait_for(read(), timeout_s)
        except (asyncio.TimeoutError, _Refused, self.aiohttp.ClientError, OSError, ValueError):
            return None

    async def _read(self, response: Any) -> bytes:
        length = response.content_length
        if length is not None and length > RESPONSE_LIMIT_BYTES:
            raise _Refused(f"the reply is {length} bytes, over the {RESPONSE_LIMIT_BYTES} byte limit", "too large")
        parts: list[bytes] = []
        size = 0
        while chunk := await response.content.readany():
            size += len(chunk)
            if size > RESPONSE_LIMIT_BYTES:
                raise _Refused(f"the reply is over the {RESPONSE_LIMIT_BYTES} byte limit", "too large")
            parts.append(chunk)
        return b"".join(parts)

    async def close(self) -> None:
        await self.session.close()


# ---------------------------------------------------------------------------------------------- the client


class _LoopThread:
    """A daemon thread running one event loop, and what lives on it (the transport, the semaphore)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=f"whileai-{name}-loop", daemon=True)
        self.http: _Transport | None = None
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

    Raises:
        BadInput: ``settings.api_key_env`` names a variable that is not set or whose value holds a control
            character, or the base URL holds a user and password as well as naming a key variable.

    The background loop and the session start on the first call (and again in a forked child); ``close()`` stops
    them, as does garbage collection.
    """

    def __init__(
        self, settings: EndpointSettings, stats: EndpointStats | None = None, *, name: str = "endpoint"
    ) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else EndpointStats()
        self.name = name
        self._api_key = read_api_key(settings.api_key_env, field=f"{name}.api_key_env")
        self._url, credentials = split_credentials(settings.base_url)
        self._secrets = [self._api_key] if self._api_key != _PLACEHOLDER_KEY else []
        if credentials is not None:
            if settings.api_key_env is not None:
                raise BadInput(
                    f"{name}.base_url holds a user and password and {name}.api_key_env names a key: the server gets "
                    "one Authorization header; keep one of them"
                )
            token = base64.b64encode(credentials.encode()).decode()
            self._authorization = f"Basic {token}"
            self._secrets += [token, credentials, credentials.partition(":")[2]]
        else:
            self._authorization = f"Bearer {self._api_key}"
        self._secrets = sorted({s for s in self._secrets if len(s) >= 4}, key=len, reverse=True)
        self._runtime: _LoopThread | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EndpointClient(name={self.name!r}, base_url={self._url!r}, model={self.settings.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an EndpointClient holds a connection pool and cannot be pickled; build one in each process")

    def redact(self, text: str) -> str:
        """``text`` with the API key and the URL's password masked (a server may echo a request back in its error or
        its reply). Mask first, cut after: a text cut first could keep part of a secret."""
        for secret in self._secrets:
            text = text.replace(secret, "[api key hidden]")
        return text

    def shown(self, text: str, limit: int = 300) -> str:
        """``text`` masked, on one line, then cut to ``limit`` characters: what a message may quote of a reply."""
        return " ".join(self.redact(text).split())[:limit]

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
            runtime.http = _Transport(self._url, self._authorization, self.settings.concurrency)
        if runtime.semaphore is None:
            runtime.semaphore = asyncio.Semaphore(self.settings.concurrency)

    # ------------------------------------------------------------------ one call

    def _backoff(self, attempt: int) -> float:
        base = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2**attempt)
        return base * random.uniform(0.5, 1.0)

    async def _post(
        self,
        runtime: _LoopThread,
        request: dict[str, Any],
        silence_s: float | None = None,
        on_piece: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """POST one chat completion and return the response's JSON object (a streamed one assembled).

        An unstreamed body is read as text and decoded here, so that an empty or cut one is told apart from any
        other error.

        Raises:
            MalformedResponse: a 200 whose body is empty, not JSON (cut short, or a proxy's HTML page) or not an
                object, or a stream that carries an error.
            _StatusError, _ConnectionLost, _Silent, _Refused: the call got no usable reply.
        """
        assert runtime.http is not None
        reply = await runtime.http.post("/chat/completions", request, silence_s, on_piece)
        if isinstance(reply, dict):
            return reply
        if not reply.strip():
            raise MalformedResponse("the body is empty")
        try:
            response = json.loads(reply)
        except ValueError:
            raise MalformedResponse(
                f"the body is not JSON (cut short?) after {len(reply)} characters: {self.shown(reply, 80)!r}"
            ) from None
        if not isinstance(response, dict):
            raise MalformedResponse("the body is not a JSON object")
        return response

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
        self.settings = self.settings.model_copy(update={"concurrency": max(1, int(concurrency))})
        if self._runtime is not None:
            self._runtime.semaphore = None

    async def _ask(self, runtime: _LoopThread, call: Call) -> Any:
        settings = self.settings
        loop = asyncio.get_running_loop()
        attempt = 0
        retry = False  # a repeat after a failure; a call sent again after a refused form is not one
        resent = False  # the one free resend of a request whose connection died before any reply
        # The deadline counts from the call's first slot: time spent queued behind the concurrency limit is this
        # client's doing, not the server's, so a batch larger than the server's slots is not cut short by it.
        deadline: float | None = None
        while True:
            if deadline is not None and deadline - loop.time() <= 0:
                raise CallError("the batch deadline passed before the call could be made", "deadline")
            wait_hint: float | None = None
            assert runtime.semaphore is not None
            async with runtime.semaphore:
                if deadline is None:
                    deadline = loop.time() + settings.batch_deadline_s
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise CallError("the batch deadline passed before the call could be made", "deadline")
                # The body is built once the call may go, so a call queued behind a refusal sends the new form.
                request = call.body()
                self.stats.count_call(retry=retry)
                started = time.perf_counter()
                # A streamed call may take as long as the batch allows while pieces keep coming; timeout_s bounds
                # the silence between them. An unstreamed one has timeout_s for the whole answer.
                streaming = bool(request.get("stream"))
                timeout = remaining if streaming else min(settings.timeout_s, remaining)
                streamed = [0]

                def piece(counter: list[int] = streamed) -> None:
                    counter[0] += 1
                    self.stats.count_streamed(1)

                response: dict[str, Any] = {}
                try:
                    response = await asyncio.wait_for(
                        self._post(runtime, request, settings.timeout_s if streaming else None, piece),
                        timeout=timeout,
                    )
                    answer = call.read(response)
                except asyncio.TimeoutError:
                    if streaming or timeout < settings.timeout_s:
                        raise CallError(f"the batch deadline passed after {timeout:.1f}s", "deadline") from None
                    error = CallError(f"no answer within timeout_s={settings.timeout_s}", "timeout")
                    retryable = True
                except _Silent:
                    error = CallError(
                        f"no answer within timeout_s={settings.timeout_s} (the server sent nothing for that long)",
                        "timeout",
                    )
                    retryable = True
                except _Dropped as exc:
                    if not resent:  # a pooled connection that died: once more on a fresh one, no backoff
                        resent = retry = True
                        continue
                    error = CallError(f"connection error: {self.shown(str(exc))}", "connection")
                    retryable = True
                except _ConnectionLost as exc:
                    error = CallError(f"connection error: {self.shown(str(exc))}", "connection")
                    retryable = True
                except _Refused as exc:
                    raise CallError(self.shown(str(exc)), exc.kind) from None
                except _StatusError as exc:
                    status = exc.status
                    if call.refused is not None and call.refused(status, exc.text):
                        retry = False
                        continue  # send again at once in the new form; no retry spent
                    error = CallError(f"HTTP {status}: {self.shown(exc.text)}", f"http {status}")
                    retryable = status in _RETRY_STATUSES or status >= 500
                    if status in (429, 503):
                        wait_hint = retry_after(exc.headers)
                except MalformedResponse as exc:
                    error = CallError(f"HTTP 200 but {self.shown(str(exc))}", "bad response")
                    retryable = True
                except call.unusable:  # an answer, just not a usable one: counted, and not retried
                    self._count_answer(started, response, streamed[0])
                    raise
                except Exception as exc:  # anything else a reader raises
                    error = CallError(f"{type(exc).__name__}: {self.shown(str(exc))}".rstrip(": "), "error")
                    retryable = False
                else:
                    self._count_answer(started, response, streamed[0])
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
        waves = -(-calls // self.settings.concurrency)
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
