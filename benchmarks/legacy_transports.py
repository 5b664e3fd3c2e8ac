"""The two HTTP transports whileai's judge used before its one aiohttp transport, kept only as ``bench_judge.py``'s
baselines: a hand-written HTTP/1.1 client on asyncio's streams (plain ``http://`` servers) and openai's
``AsyncOpenAI`` on httpx (``https://`` and proxies). Nothing in ``core/`` imports this file.

Each has one coroutine, ``post(path, request) -> str`` (the body's text; a status >= 300 raises), and ``close()``.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from typing import Any


class StatusError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


class OwnHttp11:
    """Chat-completion POSTs over HTTP/1.1 with keep-alive on asyncio's streams, as whileai sent them to a plain
    ``http://`` server before it moved to aiohttp (its faults are the ones ``test_judge_faults.py`` checks)."""

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
            raise ConnectionError(f"cannot connect to {self.netloc}: {exc}") from None
        return reader, writer, False

    async def post(self, path: str, request: dict[str, Any]) -> str:
        """POST ``request`` as JSON and return the body's text; raises ``StatusError`` for a status >= 300 and
        ``ConnectionError`` when the connection fails."""
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
                status, _headers, text, keep = await read_reply(line, reader)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:  # ValueError: not an HTTP reply
                writer.close()
                if reused and not started:
                    continue  # a kept connection the server had closed: send again on a new one
                raise ConnectionError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
            except BaseException:  # cancelled at a timeout or the deadline: the reply may still come on it
                writer.close()
                raise
            if keep and len(self.idle) < self.keep:
                self.idle.append((reader, writer, time.monotonic()))
            else:
                writer.close()
            if status >= 300:
                raise StatusError(status, text)
            return text

    async def close(self) -> None:
        while self.idle:
            self.idle.pop()[1].close()


async def read_reply(line: bytes, reader: asyncio.StreamReader) -> tuple[int, dict[str, str], str, bool]:
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


class OpenAIOnHttpx:
    """openai's client on httpx, called the way whileai called it: ``post`` with a plain JSON body, no typed
    request or response models, its pool sized to the calls in flight and kept for a minute."""

    def __init__(self, base_url: str, api_key: str, *, keep: int) -> None:
        import openai

        limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
            max_connections=max(keep * 2, 16), max_keepalive_connections=keep, keepalive_expiry=60.0
        )
        self.client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=60.0,
            http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=60.0),
        )

    async def post(self, path: str, request: dict[str, Any]) -> str:
        return await self.client.post(path, body=request, cast_to=str)

    async def close(self) -> None:
        await self.client.close()
