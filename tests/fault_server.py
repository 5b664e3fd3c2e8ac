"""A raw asyncio HTTP server on 127.0.0.1 that writes exactly the bytes a test gives it, for the judge's transport
tests: every fault (a drop, a cut, a slow drip, a stream that goes silent) is the fault under test.

``FaultServer(handler)`` runs ``handler(reader, writer, server)`` once per connection on its own event loop in a
thread; ``serving(*answers)`` is the usual handler (one answer per request, the last repeating); ``reply(...)`` builds
a whole reply; ``sse(...)`` the bytes of a streamed chat completion. The ``fault_server`` fixture
(tests/integration/conftest.py) starts them and stops them after the test.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

COMPLETION = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}
BODY = json.dumps(COMPLETION).encode()


def reply(body: bytes = BODY, *head: str, status: str = "200 OK", version: str = "HTTP/1.1") -> bytes:
    """A whole reply: the status line, ``head`` (a Content-Length is added unless a header frames the body)."""
    framed = any(h.lower().startswith(("content-length", "transfer-encoding")) for h in head) or version == "HTTP/1.0"
    lines = [*head] if framed else [*head, f"Content-Length: {len(body)}"]
    return (f"{version} {status}\r\n" + "".join(f"{line}\r\n" for line in lines) + "\r\n").encode() + body


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes] | None:
    """The request line, headers (lower-case names) and body of one request; None at the end of the stream."""
    line = await reader.readline()
    if not line:
        return None
    headers: dict[str, str] = {}
    while (field_line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = field_line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return line.decode("latin-1").strip(), headers, body


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "FaultServer"], Awaitable[None]]


@dataclass
class FaultServer:
    """A server on its own event loop in a thread; ``handler`` runs once per connection."""

    handler: Handler
    host: str = "127.0.0.1"
    port: int = 0
    connections: int = 0
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def start(self) -> FaultServer:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer, self)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def main() -> None:
            self.server = await asyncio.start_server(serve, self.host, self.port, limit=2**27)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(main(), self.loop)
        assert ready.wait(10)
        return self

    def url(self, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}/v1"

    async def next_request(self, reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes] | None:
        request = await read_request(reader)
        if request is not None:
            self.requests.append(request)
        return request

    def stop(self) -> None:
        async def close() -> None:
            self.server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:  # a handler still waiting on its connection ends here, not at garbage collection
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def serving(*answers: bytes | Callable[[int], bytes], close: bool = False) -> Handler:
    """A handler that answers each request on a connection with the next of ``answers`` (the last repeats)."""

    async def handle(reader, writer, server) -> None:
        while await server.next_request(reader) is not None:
            answer = answers[min(len(server.requests), len(answers)) - 1]
            writer.write(answer(len(server.requests)) if callable(answer) else answer)
            await writer.drain()
            if close:
                return

    return handle


def sse_event(data: object) -> bytes:
    """One server-sent event carrying ``data`` as JSON (or ``[DONE]`` as it is)."""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


def sse_head() -> bytes:
    """The head of a streamed reply: chunked, ``text/event-stream``."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (an empty ``data`` ends the body)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def delta(content: str | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    """One chunk of a streamed chat completion."""
    event: dict = {"object": "chat.completion.chunk", "model": "m"}
    event["choices"] = (
        []
        if content is None and finish is None
        else [{"index": 0, "delta": {} if content is None else {"content": content}, "finish_reason": finish}]
    )
    if usage is not None:
        event["usage"] = usage
    return event
