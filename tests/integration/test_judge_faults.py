"""The judge's one HTTP transport against servers, proxies and load balancers that misbehave the way real ones do,
and with the ones that behave: a whole batch in flight, the request as it goes on the wire.

A raw asyncio server on 127.0.0.1 writes exactly the bytes each test gives it, so every fault is the fault under test:
a host name whose first address drops connection attempts, a ``408`` sent on an idle pooled connection, a server
that reads a request and closes, a gzip reply, redirects, proxies from the environment, chunked bodies with
extensions and trailers, HTTP/1.0, ``100 Continue``, a 50 MB body and one over the limit, a slow drip, a close after
the reply, a reset on a kept connection. Each test says whether the call was answered, retried, or failed, counted
by kind.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest

from whileai import GroupwiseGrading
from whileai.endpoint import Call, EndpointSettings, first_choice
from whileai.http_client import RESPONSE_LIMIT_BYTES, EndpointClient, proxy_for
from whileai.judge import JudgeConfig

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


@pytest.fixture
def fault_server() -> Iterator[Callable[..., FaultServer]]:
    started: list[FaultServer] = []

    def start(handler: Handler, **fields) -> FaultServer:
        server = FaultServer(handler, **fields).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


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


def ask(url: str, times: int = 1, pause: float = 0.0, **fields) -> tuple[list[object], EndpointClient]:
    """``times`` batches of one chat call on one client (one pool), ``pause`` seconds apart; each call's answer or
    its error."""
    options = {"max_retries": 0, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 20.0, **fields}
    settings = EndpointSettings(base_url=url, model="m", **options)
    client = EndpointClient(settings)
    call = Call(
        body=lambda: settings.chat_request([{"role": "user", "content": "hi"}]),
        read=lambda response: first_choice(response)["message"]["content"],
    )
    answers: list[object] = []
    try:
        for number in range(times):
            if number:
                time.sleep(pause)
            (outcome,) = client.run([call])
            answers.append(outcome.error if outcome.error is not None else outcome.answer)
    finally:
        client.close()
    return answers, client


def kinds(answers: list[object]) -> list[str]:
    return [getattr(a, "kind", a) for a in answers]  # type: ignore[misc]


@pytest.fixture(autouse=True)
def _no_proxy_in_the_environment(monkeypatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


# ---------------------------------------------------------------- what failed before


def test_a_host_whose_first_address_drops_connection_attempts_is_reached_on_the_next(fault_server, monkeypatch) -> None:
    server = fault_server(serving(reply()))
    # 127.0.0.2 listens on the same port with a full accept queue: the kernel drops further connection attempts.
    hole = socket.socket()
    hole.bind(("127.0.0.2", server.port))
    hole.listen(0)
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.2", server.port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    real = socket.getaddrinfo

    def two_addresses(host, *args, **kwargs):
        if host == "judge.two.test":
            found = real("127.0.0.1", *args, **kwargs)
            return [(f, t, p, c, ("127.0.0.2", a[1])) for f, t, p, c, a in found] + found
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    try:
        started = time.monotonic()
        answers, client = ask(server.url("judge.two.test"), timeout_s=20.0)
        waited = time.monotonic() - started
    finally:
        for sock in (hole, *fillers):
            sock.close()
    assert answers == ["hello"] and client.stats.retries == 0
    assert waited < 10  # the second address after a quarter second, not the first one's timeout


def test_a_408_sent_on_an_idle_pooled_connection_is_not_read_as_the_next_reply(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        if await server.next_request(reader) is None:
            return
        writer.write(reply())
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(reply(b"", "Connection: close", status="408 Request Timeout"))
        await writer.drain()

    server = fault_server(handle)
    answers, _ = ask(server.url(), times=4, pause=0.4)  # the 408 arrives on the pooled connection meanwhile
    assert answers == ["hello"] * 4 and server.connections == 4


def test_a_server_that_reads_the_request_and_closes_gets_it_at_most_twice(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        await server.next_request(reader)  # and close without a word

    server = fault_server(handle)
    answers, client = ask(server.url())
    assert kinds(answers) == ["connection"]
    assert len(server.requests) <= 2 and client.stats.calls == len(server.requests) == client.stats.retries + 1


def test_a_gzip_reply_is_decoded(fault_server) -> None:
    server = fault_server(serving(reply(gzip.compress(BODY), "Content-Encoding: gzip")))
    answers, _ = ask(server.url(), times=2)
    assert answers == ["hello", "hello"]


def test_a_redirect_within_the_origin_is_followed(fault_server) -> None:
    def route(number: int) -> bytes:
        line = server.requests[-1][0]
        if line.startswith("POST /v1/"):
            return reply(b"", "Location: /v2/chat/completions", status="307 Temporary Redirect")
        return reply()

    server = fault_server(serving(route))
    answers, client = ask(server.url())
    assert answers == ["hello"] and [r[0] for r in server.requests] == [
        "POST /v1/chat/completions HTTP/1.1",
        "POST /v2/chat/completions HTTP/1.1",
    ]
    assert json.loads(server.requests[1][2])["model"] == "m" and client.stats.calls == 1


@pytest.mark.parametrize("target", ["http://other.test/v1/chat/completions", "https://127.0.0.1:{port}/v1/x"])
def test_a_redirect_to_another_origin_is_an_error_that_names_it(fault_server, target) -> None:
    server = fault_server(serving(lambda n: reply(b"", f"Location: {target.format(port=server.port)}", status="308 X")))
    answers, client = ask(server.url(), max_retries=3)
    assert kinds(answers) == ["http 308"] and "another origin; set base_url" in str(answers[0])
    assert client.stats.calls == 1  # not retried: no retry changes where the server points


def test_proxies_are_read_as_httpx_reads_them(fault_server, monkeypatch) -> None:
    proxy = fault_server(serving(reply()))
    monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", ".internal")
    # '.internal' spares the subdomains of internal, not the host itself: this goes through the proxy
    answers, _ = ask("http://internal:9/v1")
    assert answers == ["hello"] and proxy.requests[0][0] == "POST http://internal:9/v1/chat/completions HTTP/1.1"
    assert proxy_for("http://judge.internal:9/v1") is None
    monkeypatch.setenv("NO_PROXY", "*")
    assert proxy_for("http://internal:9/v1") is None


@pytest.mark.parametrize(
    ("environ", "url", "proxy"),
    [
        ({"HTTP_PROXY": "p:1"}, "http://a.test/v1", "http://p:1"),
        ({"HTTP_PROXY": "p:1"}, "https://a.test/v1", None),
        ({"HTTPS_PROXY": "http://s:2", "ALL_PROXY": "http://all:3"}, "https://a.test/v1", "http://s:2"),
        ({"ALL_PROXY": "http://all:3"}, "http://a.test/v1", "http://all:3"),
        ({"http_proxy": "http://low:1", "HTTP_PROXY": "http://up:2"}, "http://a.test/v1", "http://low:1"),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "example.com"}, "http://api.example.com/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "example.com"}, "http://example.com/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "example.com"}, "http://badexample.com/v1", "http://p:1"),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "*.example.com"}, "http://example.com/v1", "http://p:1"),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "localhost,127.0.0.1"}, "http://127.0.0.1:8000/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "10.0.0.0/8"}, "http://10.2.3.4/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "10.0.0.0/8"}, "http://11.2.3.4/v1", "http://p:1"),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "::1"}, "http://[::1]:8000/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "judge.test:8000"}, "http://judge.test:8000/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "judge.test:8000"}, "http://judge.test:9000/v1", "http://p:1"),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": "http://judge.test"}, "http://judge.test/v1", None),
        ({"HTTP_PROXY": "p:1", "NO_PROXY": " a.test , b.test "}, "http://b.test/v1", None),
    ],
)
def test_proxy_rules(environ, url, proxy) -> None:
    assert proxy_for(url, environ) == proxy


# ---------------------------------------------------------------- what passed before, and must still


def test_the_default_settings_put_every_call_of_a_batch_in_flight(make_judge, judge_server, judge_tools) -> None:
    # 40 calls meet at a barrier on the server: only possible when all 40 are in flight at once.
    assert JudgeConfig(model="m").concurrency >= 40
    barrier = threading.Barrier(40)

    def meet(body):
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            return judge_tools.Status(500)
        return judge_tools.Reply(judge_tools.auto_answer(body))

    judge_server.push(*[meet] * 40)
    gar = GroupwiseGrading(grader=make_judge("grader", max_retries=0))
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0] * 40, num_generations=3)
    prompts = [f"refund ORD-{g}" for g in range(40) for _ in range(3)]
    completions = ["<tool_call>a</tool_call> done", "<tool_call>a</tool_call>" * 2 + " done", "no"] * 40
    reward(prompts=prompts, completions=completions)
    assert gar.stats.failed == 0 and judge_server.calls == 40


def test_the_request_is_the_chat_completion_as_json_with_its_headers(fault_server) -> None:
    server = fault_server(serving(reply()))
    answers, _ = ask(server.url())
    line, headers, body = server.requests[0]
    assert answers == ["hello"] and line == "POST /v1/chat/completions HTTP/1.1"
    assert json.loads(body)["model"] == "m" and json.loads(body)["messages"] == [{"role": "user", "content": "hi"}]
    assert headers["content-type"] == "application/json" and headers["authorization"] == "Bearer EMPTY"


def test_a_chunked_reply_with_extensions_and_trailers_is_read_whole(fault_server) -> None:
    chunks = b"".join(f"{len(p):x};name=value\r\n".encode() + p + b"\r\n" for p in (BODY[:7], BODY[7:]))
    body = chunks + b"0\r\nX-Trailer: done\r\n\r\n"
    server = fault_server(serving(reply(body, "Transfer-Encoding: chunked")))
    answers, _ = ask(server.url(), times=2)
    assert answers == ["hello", "hello"] and server.connections == 1


def test_an_http_1_0_reply_is_read_to_the_end_of_the_stream(fault_server) -> None:
    server = fault_server(serving(reply(version="HTTP/1.0"), close=True))
    answers, client = ask(server.url(), times=2)
    assert answers == ["hello", "hello"] and client.stats.retries == 0 and server.connections == 2


def test_a_100_continue_before_the_reply_is_skipped(fault_server) -> None:
    server = fault_server(serving(b"HTTP/1.1 100 Continue\r\n\r\n" + reply()))
    answers, _ = ask(server.url())
    assert answers == ["hello"]


def test_a_50_mb_reply_is_read_and_one_over_the_limit_is_refused(fault_server) -> None:
    padded = BODY[:-1] + b', "padding": "' + b"x" * (50 * 2**20) + b'"}'
    server = fault_server(serving(reply(padded)))
    answers, _ = ask(server.url())
    assert answers == ["hello"]
    huge = fault_server(serving(reply(b"x" * (RESPONSE_LIMIT_BYTES + 1))))
    answers, client = ask(huge.url(), max_retries=2)
    assert kinds(answers) == ["too large"] and client.stats.calls == 1


def test_a_slow_drip_within_the_timeout_is_answered(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        if await server.next_request(reader) is None:
            return
        data = reply()
        for start in range(0, len(data), 16):
            writer.write(data[start : start + 16])
            await writer.drain()
            await asyncio.sleep(0.02)

    server = fault_server(handle)
    answers, _ = ask(server.url(), timeout_s=20.0)
    assert answers == ["hello"]


def test_a_close_after_the_reply_is_no_failure(fault_server) -> None:
    server = fault_server(serving(reply(BODY, "Connection: close"), close=True))
    answers, client = ask(server.url(), times=3)
    assert answers == ["hello"] * 3 and client.stats.retries == 0 and server.connections == 3


def test_a_reset_on_a_kept_connection_is_no_failure(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        if await server.next_request(reader) is None:
            return
        writer.write(reply())
        await writer.drain()
        await asyncio.sleep(0.1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        writer.transport.abort()

    server = fault_server(handle)
    answers, client = ask(server.url(), times=3, pause=0.3)
    assert answers == ["hello"] * 3 and client.stats.calls - client.stats.retries == 3


def test_an_error_status_is_retried_by_kind_and_counted(fault_server) -> None:
    error = json.dumps({"error": {"message": "busy"}}).encode()
    server = fault_server(serving(reply(error, "Retry-After: 0", status="503 Service Unavailable"), reply()))
    answers, client = ask(server.url(), max_retries=2)
    assert answers == ["hello"] and client.stats.retries == 1
    refused = fault_server(serving(reply(error, status="400 Bad Request")))
    answers, client = ask(refused.url(), max_retries=2)
    assert kinds(answers) == ["http 400"] and "busy" in str(answers[0]) and client.stats.calls == 1
