"""Chat-completion POSTs on one aiohttp session (``Transport``): the auth headers, each URL's proxy, same-origin
redirects, the reply size limit, a streamed reply's events assembled into one chat completion, and aiohttp's errors
turned into the few this module raises, which ``whileai.http.client.EndpointClient`` retries or reports.

The boundary: every text that comes from the server (a body, a streamed event, a header, an error aiohttp raises
quoting it) goes through the client's ``whileai.http.secrets.SecretFilter`` here, before it is parsed, cut, cached or
logged. Importing it does not import ``aiohttp``: a ``Transport`` imports it when built, on an endpoint's first
call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from whileai.http.endpoint import MalformedResponse, endpoint_url
from whileai.http.proxies import proxy_for
from whileai.http.secrets import SecretFilter

__all__ = ["RESPONSE_LIMIT_BYTES", "ConnectionLost", "Dropped", "Refused", "Silent", "StatusError", "Transport"]

# The largest reply read: a judge's answer is a few kilobytes, and a server that streams without end must not take
# the process's memory with it.
RESPONSE_LIMIT_BYTES = 64 * 2**20

# Hops of a redirect chain followed within one origin.
_MAX_REDIRECTS = 5

# How long an idle pooled connection is kept: the next batch of a training run reuses it (a step is seconds to
# minutes apart; servers close idle connections on their own clock, which the pool notices).
_KEEPALIVE_S = 60.0


class StatusError(Exception):
    """An error status from the server: its code, its body's text and its headers (lower-case names)."""

    def __init__(self, status: int, text: str, headers: Mapping[str, str]) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers


class ConnectionLost(Exception):
    """No answer because of the connection: refused, reset, closed before the reply was whole, a proxy that failed."""


class Dropped(ConnectionLost):
    """The connection died before any byte of the reply came: the request can go again on a fresh one."""


class Refused(Exception):
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


class Silent(Exception):
    """The server sent nothing for the call's ``timeout_s``."""


def _checked_json(text: str, secrets: SecretFilter) -> dict[str, Any]:
    """A 200's body read as a chat completion's JSON object, every string in it cleaned of secrets.

    The body is parsed first and its strings cleaned after: a secret written with JSON escapes is whole again once
    parsed, and a short one removed from the raw text could have hit a number or broken the JSON. ``json.loads``
    quotes nothing of the text it refuses; what the message quotes is cleaned first.

    Raises:
        MalformedResponse: an empty body, one that is not JSON (cut short, or a proxy's HTML page), or not an object.
    """
    if not text.strip():
        raise MalformedResponse("the body is empty")
    try:
        response = json.loads(text)
    except ValueError:
        shown = " ".join(secrets.clean(text).split())[:80]
        raise MalformedResponse(f"the body is not JSON (cut short?) after {len(text)} characters: {shown!r}") from None
    if not isinstance(response, dict):
        raise MalformedResponse("the body is not a JSON object")
    return secrets.clean_value(response)


async def read_events(
    response: Any, secrets: SecretFilter, on_piece: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The chat completion a streamed reply adds up to: the content of its deltas, their token probabilities where
    the server sends them, the last finish reason, the usage of its last chunk (``stream_options.include_usage``), in
    the shape of an unstreamed reply. Each event is
    parsed and its strings cleaned of secrets (an event that is not JSON is cleaned as text before a message quotes
    it), and the whole content again once assembled (a secret may come a few characters an event). ``on_piece`` is
    called for each piece of content as it comes (about one token each on vLLM and llama.cpp).

    Raises:
        MalformedResponse: an event that is not JSON, or one that carries an error (vLLM reports a failure met
            mid-answer that way).
        ConnectionLost: the stream ended before ``[DONE]`` or a finish reason.
        Refused: more than the reply limit.
    """
    content: list[str] = []
    logprobs: dict[str, list[Any]] = {"content": [], "tokens": [], "token_logprobs": [], "top_logprobs": []}
    finish: str | None = None
    usage: Any = None
    model: Any = None
    buffer = b""
    size = 0
    done = False
    while not done and (chunk := await response.content.readany()):
        size += len(chunk)
        if size > RESPONSE_LIMIT_BYTES:
            raise Refused(f"the reply is over the {RESPONSE_LIMIT_BYTES} byte limit", "too large")
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # a comment (": keep-alive"), an event name, a blank line between events
            data = line[5:].strip().decode("utf-8", errors="replace")
            if data == "[DONE]":
                done = True
                break
            try:
                event = secrets.clean_value(json.loads(data))
            except ValueError:
                raise MalformedResponse(f"a stream event is not JSON: {secrets.clean(data)[:80]!r}") from None
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
                _add_logprobs(logprobs, choice.get("logprobs"))
    if not done and finish is None:
        raise ConnectionLost("the stream ended before the answer was whole")
    message = {"role": "assistant", "content": secrets.clean("".join(content))}
    answer: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if any(logprobs.values()):
        answer["logprobs"] = {key: value for key, value in logprobs.items() if value}
    return {"model": model, "choices": [answer], "usage": usage}


def _add_logprobs(joined: dict[str, list[Any]], piece: Any) -> None:
    """A stream event's token probabilities added to those of the events before it: the chat API's ``content``
    list, or the completion API's parallel lists (llama-cpp-python streams those)."""
    if not isinstance(piece, dict):
        return
    for key in ("content", "tokens", "token_logprobs", "top_logprobs"):
        if isinstance(piece.get(key), list):
            joined[key].extend(piece[key])


class Transport:
    """Chat-completion POSTs on one aiohttp session: auth headers, the proxy of each URL, same-origin redirects, the
    size limit, every text from the server through ``secrets``, and aiohttp's errors turned into this module's.

    Args:
        base_url: the server, up to ``/v1``, without credentials.
        authorization: the ``Authorization`` header.
        secrets: what every text from the server (bodies, events, headers, error messages) is cleaned with.
        connect_s: the longest a new connection may take, TCP and TLS (the call's ``timeout_s``).
    """

    def __init__(self, base_url: str, authorization: str, secrets: SecretFilter, connect_s: float) -> None:
        import aiohttp  # imported on the first call, never by `import whileai`
        import yarl

        self.aiohttp, self.yarl = aiohttp, yarl
        self.base_url, self.connect_s = base_url, connect_s
        self.secrets, self.clean = secrets, secrets.clean
        self.headers = {"Authorization": authorization, "Accept": "application/json", "User-Agent": "whileai"}
        self.session = self._session(fresh=False)
        self._fresh: Any = None  # built on the first resend

    def _session(self, fresh: bool) -> Any:
        """The pool (connections kept a minute, for the next batch), or with ``fresh`` one that opens a new
        connection for every request and closes it after: where a request goes again after its kept connection
        died or was timed out by the server (a 408 on an idle connection)."""
        aiohttp = self.aiohttp
        # No limit of the pool's own: the client's semaphore bounds the calls in flight (and may be raised once the
        # server says its slots), and a call waiting for a pooled connection would spend its connect timeout on it.
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=0,
            keepalive_timeout=None if fresh else _KEEPALIVE_S,
            force_close=fresh,
            happy_eyeballs_delay=0.25,
            ttl_dns_cache=60,
        )
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),  # each request sets its own
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
        *,
        fresh: bool = False,
    ) -> dict[str, Any]:
        """POST ``request`` as JSON and return the chat completion: the body's JSON object, or for a streamed reply
        (``text/event-stream``) the one its events add up to (``on_piece`` called for each piece of content); with
        ``fresh``, on a new connection.

        ``silence_s`` bounds each wait for the next piece of a reply; None waits as long as the caller does. A new
        connection has ``connect_s``. A reply given up (cancelled, too large, silent, unreadable) closes its
        connection, so the server sees the request go and stops working on it.

        Raises:
            StatusError: a status >= 300 that is no same-origin redirect.
            Dropped, ConnectionLost: no whole reply (no connection within ``connect_s`` included).
            Silent: nothing came for ``silence_s`` seconds.
            Refused: a redirect to another origin, too many redirects, a body over the limit, a reply whose HTTP
                framing is broken (kind ``"bad framing"``).
            MalformedResponse: a 200 that is no chat completion, or a stream that carries an error.
        """
        aiohttp = self.aiohttp
        if fresh and self._fresh is None:
            self._fresh = self._session(fresh=True)
        session = self._fresh if fresh else self.session
        body = json.dumps(request, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        url = self.yarl.URL(endpoint_url(self.base_url, path))
        headers = {**self.headers, "Content-Type": "application/json"}
        # sock_read: the longest wait for the next bytes from the server, the reply's head included; connect: a new
        # connection's TCP and TLS handshakes.
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.connect_s, sock_connect=self.connect_s, sock_read=silence_s
        )
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                async with session.post(
                    url, data=body, headers=headers, proxy=proxy_for(str(url)), allow_redirects=False, timeout=timeout
                ) as response:
                    location = response.headers.get("Location")
                    if 300 <= response.status < 400 and location:
                        url = self._redirected(url, location, response.status)
                        continue
                    return await self._reply(response, on_piece)
            except aiohttp.ConnectionTimeoutError:
                raise ConnectionLost(
                    f"no connection within timeout_s={self.connect_s:g} (an address that does not answer, or a TLS "
                    "handshake that never ends: is the URL's scheme the server's?)"
                ) from None
            except aiohttp.ServerTimeoutError:  # sock_read: the server went silent
                raise Silent(f"the server sent nothing for {silence_s:g}s") from None
            except aiohttp.ClientConnectorError as exc:  # no connection at all (a proxy's included)
                raise ConnectionLost(self.clean(f"cannot connect to {exc.host}:{exc.port}: {exc.os_error}")) from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:  # closed or reset before a reply
                raise Dropped(self.clean(f"{type(exc).__name__}: {exc}".rstrip(": "))) from None
            except aiohttp.ClientHttpProxyError as exc:  # the proxy refused the tunnel
                raise ConnectionLost(self.clean(f"the proxy answered {exc.status} {exc.message}")) from None
            except aiohttp.ClientResponseError as exc:  # aiohttp's parser: the reply is not valid HTTP
                raise Refused(
                    self.clean(
                        f"the server's reply is not valid HTTP: its framing is broken ({exc.message}); not sent "
                        "again, since the server would answer the same (fix the server or the proxy before it)"
                    ),
                    "bad framing",
                ) from None
            except aiohttp.ClientError as exc:  # a reply cut short, and the rest of aiohttp's
                raise ConnectionLost(self.clean(f"{type(exc).__name__}: {exc}".rstrip(": "))) from None
        raise Refused(f"more than {_MAX_REDIRECTS} redirects from {self.base_url}", "redirects")

    def _redirected(self, url: Any, location: str, status: int) -> Any:
        """Where a redirect leads, when it is one to follow: the same origin, and no credentials in it.

        Raises:
            Refused: a redirect to another origin, or to a URL that carries a user name or password (never followed:
                it would send, or show, what the ``Location`` carries).
        """
        target = url.join(self.yarl.URL(location))
        if target.user is not None or target.password is not None:
            raise Refused(
                f"HTTP {status}: the server redirects to a URL that carries a user name or password "
                f"({self.clean(str(target.with_user(None)))}); not followed: set base_url to the address the server "
                "means, its credentials in api_key_env",
                f"http {status}",
            )
        if _origin(target) != _origin(url):
            raise Refused(
                self.clean(
                    f"HTTP {status}: the server redirects to {target}, another origin; set base_url to the server's "
                    "own address"
                ),
                f"http {status}",
            )
        return target

    async def _reply(self, response: Any, on_piece: Callable[[], None] | None) -> dict[str, Any]:
        """A response read whole, every text of it cleaned: the chat completion, or the error status."""
        try:
            if response.status < 300 and response.content_type == "text/event-stream":
                return await read_events(response, self.secrets, on_piece)
            text = _text(await self._read(response), response.charset)
        except BaseException:
            response.close()  # not back to the pool: the server must see the request go
            raise
        if response.status >= 300:  # the body is only quoted: cleaned as text
            headers = {k.lower(): self.clean(v) for k, v in response.headers.items()}
            raise StatusError(response.status, self.clean(text), headers)
        return _checked_json(text, self.secrets)

    async def get(self, url: str, timeout_s: float) -> tuple[int, str] | None:
        """GET ``url``: its status and text (cleaned), or None when nothing readable came within ``timeout_s``."""

        async def read() -> tuple[int, str]:
            async with self.session.get(
                url, headers={**self.headers, "Accept": "*/*"}, proxy=proxy_for(url), allow_redirects=False
            ) as response:
                return response.status, self.clean(_text(await self._read(response), response.charset))

        try:
            return await asyncio.wait_for(read(), timeout_s)
        except (asyncio.TimeoutError, Refused, self.aiohttp.ClientError, OSError, ValueError):
            return None

    async def _read(self, response: Any) -> bytes:
        length = response.content_length
        if length is not None and length > RESPONSE_LIMIT_BYTES:
            raise Refused(f"the reply is {length} bytes, over the {RESPONSE_LIMIT_BYTES} byte limit", "too large")
        parts: list[bytes] = []
        size = 0
        while chunk := await response.content.readany():
            size += len(chunk)
            if size > RESPONSE_LIMIT_BYTES:
                raise Refused(f"the reply is over the {RESPONSE_LIMIT_BYTES} byte limit", "too large")
            parts.append(chunk)
        return b"".join(parts)

    async def close(self) -> None:
        await self.session.close()
        if self._fresh is not None:
            await self._fresh.close()
