"""The judge's HTTP for a plain ``http://`` server: a whole batch in flight by default, keep-alive, and the replies a
server may send (chunked, HTTP/1.0 to the end of the stream, a kept connection it closed meanwhile).

A server on a real socket on 127.0.0.1 answers with bytes written here, so each reply's framing is exactly the one
under test; the scripted judge server of ``tests/judge_server.py`` checks the batch."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import pytest

from whileai import GroupwiseGrading
from whileai.endpoint import Call, EndpointSettings, first_choice
from whileai.http_client import EndpointClient, _plain_http
from whileai.judge import JudgeConfig

# ---------------------------------------------------------------- a batch in flight


def test_the_default_settings_put_every_call_of_a_batch_in_flight(make_judge, judge_server, judge_tools) -> None:
    # 40 calls meet at a barrier on the server: only possible when all 40 are in flight at once (the old default
    # of 32 left 8 waiting for the barrier to break).
    assert JudgeConfig(model="m").concurrency >= 40
    barrier = threading.Barrier(40)

    def meet(body):
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            return judge_tools.Status(500)
        return judge_tools.Reply(judge_tools.auto_answer(body))

    judge_server.push(*[meet] * 40)
    judge = make_judge("grader", max_retries=0)
    gar = GroupwiseGrading(grader=judge)
    reward = gar.trl_reward(lambda prompts, completions, **kw: [1.0, 1.0, 0.0] * 40, num_generations=3)
    prompts = [f"refund ORD-{g}" for g in range(40) for _ in range(3)]
    completions = ["<tool_call>a</tool_call> done", "<tool_call>a</tool_call>" * 2 + " done", "no"] * 40
    reward(prompts=prompts, completions=completions)
    assert gar.stats.failed == 0 and judge_server.calls == 40


# ---------------------------------------------------------------- replies as bytes

_COMPLETION = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}


class _Handler(socketserver.BaseRequestHandler):
    """Reads requests on one connection and writes what the server's ``reply(number, body)`` returns:
    ``(bytes, close_after)``."""

    def handle(self) -> None:
        server: _RawServer = self.server  # type: ignore[assignment]
        stream = self.request.makefile("rb")
        with server.lock:
            server.connections += 1
        while True:
            line = stream.readline()
            if not line:
                return
            length = 0
            while (header := stream.readline()) not in (b"\r\n", b""):
                name, _, value = header.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = json.loads(stream.read(length))
            with server.lock:
                server.requests += 1
                number = server.requests
            data, close = server.reply(number, body)
            self.request.sendall(data)
            if close:
                self.request.shutdown(socket.SHUT_RDWR)
                return


class _RawServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, reply: Callable[[int, dict], tuple[bytes, bool]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply = reply
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture
def raw_server() -> Iterator[Callable[[Callable[[int, dict], tuple[bytes, bool]]], _RawServer]]:
    started: list[_RawServer] = []

    def start(reply: Callable[[int, dict], tuple[bytes, bool]]) -> _RawServer:
        server = _RawServer(reply)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _ask(url: str, times: int = 1) -> tuple[list[object], EndpointClient]:
    """``times`` batches of one chat call each through an endpoint client; the answers (or errors)."""
    settings = EndpointSettings(base_url=url, model="m", max_retries=1, backoff_base_s=0.01, backoff_max_s=0.05)
    client = EndpointClient(settings)

    def read(response: dict) -> str:
        return first_choice(response)["message"]["content"]

    call = Call(body=lambda: settings.chat_request([{"role": "user", "content": "hi"}]), read=read)
    answers = []
    try:
        for _ in range(times):
            (outcome,) = client.run([call])
            answers.append(outcome.error if outcome.error is not None else outcome.answer)
    finally:
        client.close()
    return answers, client


def _framed(body: bytes, *head: str, version: str = "HTTP/1.1") -> bytes:
    return (f"{version} 200 OK\r\n" + "".join(f"{h}\r\n" for h in head) + "\r\n").encode() + body


def test_a_chunked_reply_is_read_whole(raw_server) -> None:
    data = json.dumps(_COMPLETION).encode()
    chunks = b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (data[:10], data[10:]))
    server = raw_server(lambda n, body: (_framed(chunks + b"0\r\n\r\n", "Transfer-Encoding: chunked"), False))
    answers, client = _ask(server.url, times=2)
    assert answers == ["hello", "hello"] and client.stats.retries == 0
    assert server.connections == 1  # kept alive between the two batches


def test_an_http_1_0_reply_without_a_length_is_read_to_the_end(raw_server) -> None:
    data = json.dumps(_COMPLETION).encode()
    server = raw_server(lambda n, body: (_framed(data, version="HTTP/1.0"), True))
    answers, client = _ask(server.url, times=2)
    assert answers == ["hello", "hello"] and client.stats.retries == 0
    assert server.connections == 2  # not kept: a new one for the second call


def test_a_kept_connection_the_server_closed_is_replaced_without_a_retry(raw_server) -> None:
    # The server answers as if keeping the connection, then drops it (an idle timeout, say): the next call goes out
    # on a fresh connection, and neither a failure nor a retry is counted.
    data = json.dumps(_COMPLETION).encode()
    server = raw_server(lambda n, body: (_framed(data, f"Content-Length: {len(data)}"), True))
    answers, client = _ask(server.url, times=3)
    assert answers == ["hello"] * 3 and client.stats.retries == 0 and client.stats.calls == 3
    assert server.connections == 3 and server.requests == 3


def test_the_request_is_the_chat_completion_as_json(raw_server) -> None:
    seen = []
    data = json.dumps(_COMPLETION).encode()

    def reply(number: int, body: dict) -> tuple[bytes, bool]:
        seen.append(body)
        return _framed(data, f"Content-Length: {len(data)}"), False

    server = raw_server(reply)
    answers, _ = _ask(server.url)
    assert answers == ["hello"]
    assert seen[0]["model"] == "m" and seen[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_an_error_status_keeps_its_text_and_retry_after(raw_server) -> None:
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    server = raw_server(
        lambda n, _: (
            (
                f"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body,
                False,
            )
            if n == 1
            else (_framed(json.dumps(_COMPLETION).encode(), "Connection: close"), True)
        )
    )
    answers, client = _ask(server.url)
    assert answers == ["hello"] and client.stats.retries == 1


# ---------------------------------------------------------------- which client


def test_https_and_proxied_urls_go_through_openai_s_client(monkeypatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert _plain_http("http://127.0.0.1:8000/v1")
    assert not _plain_http("https://api.openai.com/v1")
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    assert not _plain_http("http://judge.internal:8000/v1")
    monkeypatch.setenv("no_proxy", "judge.internal")
    assert _plain_http("http://judge.internal:8000/v1")
