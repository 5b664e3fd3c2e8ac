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

import pytest
from fault_server import BODY, reply, serving

from whileai import GroupwiseGrading
from whileai.http.client import EndpointClient
from whileai.http.endpoint import Call, EndpointSettings, first_choice
from whileai.http.proxies import proxy_for
from whileai.http.transport import RESPONSE_LIMIT_BYTES


def ask(url: str, times: int = 1, pause: float = 0.0, **fields) -> tuple[list[object], EndpointClient]:
    """``times`` batches of one chat call on one client (one pool), ``pause`` seconds apart; each call's answer or
    its error."""
    options = {"max_retries": 0, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 20.0, "stream": False}
    options.update(fields)
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
    assert len(server.requests) <= 2 and client.stats.calls == len(server.requests) == 2
    assert (client.stats.resent, client.stats.retries) == (1, 0)  # sent again on a new connection, not a retry


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


def test_a_same_origin_redirect_carrying_credentials_is_refused_without_showing_them(fault_server) -> None:
    def route(number: int) -> bytes:
        target = f"http://user:SECRETKEY123@127.0.0.1:{server.port}/v2/chat/completions"
        return reply(b"", f"Location: {target}", status="307 Temporary Redirect")

    server = fault_server(serving(route))
    answers, client = ask(server.url(), max_retries=3)
    said = str(answers[0])
    assert kinds(answers) == ["http 307"] and "carries a user name or password" in said and "SECRETKEY123" not in said
    assert len(server.requests) == 1 and client.stats.calls == 1  # not followed, not retried


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


def test_a_remote_server_that_says_nothing_gets_every_call_of_a_batch_in_flight(
    make_judge, judge_server, judge_tools
) -> None:
    # 40 calls meet at a barrier on the server: only possible when all 40 are in flight at once. The default for
    # a server that does not say how many it runs at once, elsewhere than on this machine.
    from whileai.judge.client import server_concurrency

    assert server_concurrency(lambda url: None, "https://judge.example/v1")[0] >= 40
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
