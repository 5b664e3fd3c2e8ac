"""The transport's last edges, each against a real socket server on 127.0.0.1 that does what the edge needs: a TLS
handshake that never ends under a streamed call, a 408 that meets the next request on a kept connection, a reply
whose HTTP framing is broken, a SOCKS proxy in the environment, CR/LF in ``base_url``, a password in ``base_url``
with the concurrency left to the server, a server that never answers the concurrency question, and a Retry-After
above the longest backoff (``test_judge_failures.py``)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
from fault_server import BODY, COMPLETION, chunk, delta, reply, serving, sse_event, sse_head

from whileai.errors import BadInput
from whileai.http.client import EndpointClient
from whileai.http.endpoint import Call, EndpointSettings, first_choice
from whileai.judge import JudgeConfig
from whileai.judge.client import JudgeClient


def ask(url: str, times: int = 1, **fields) -> tuple[list[object], EndpointClient]:
    """``times`` chat calls one after the other on one client: each answer, or its error."""
    options = {"max_retries": 0, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0, "stream": False}
    settings = EndpointSettings(base_url=url, model="m", **{**options, **fields})
    client = EndpointClient(settings)
    call = Call(
        body=lambda: settings.chat_request([{"role": "user", "content": "hi"}]),
        read=lambda response: first_choice(response)["message"]["content"],
    )
    answers: list[object] = []
    try:
        for _ in range(times):
            (outcome,) = client.run([call])
            answers.append(outcome.error if outcome.error is not None else outcome.answer)
    finally:
        client.close()
    return answers, client


@pytest.fixture(autouse=True)
def _no_proxy_in_the_environment(monkeypatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_a_streamed_call_bounds_its_connection_by_timeout_s_then_retries(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        await reader.read(1 << 16)  # a TLS ClientHello, never answered
        await asyncio.sleep(60)

    server = fault_server(handle)
    url = server.url().replace("http://", "https://")
    started = time.monotonic()
    (error,), client = ask(url, stream=True, timeout_s=1.0, max_retries=1, batch_deadline_s=120.0)
    waited = time.monotonic() - started
    assert getattr(error, "kind", None) == "connection" and "no connection within timeout_s=1" in str(error)
    assert client.stats.retries == 1 and server.connections == 2
    assert waited < 30  # two attempts of a second each, not the batch's 120 s


def test_a_408_that_meets_the_next_request_is_sent_again_on_a_new_connection(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        first = True
        while await server.next_request(reader) is not None:
            if first:
                writer.write(reply())
                first = False
            else:  # the idle timeout fired as the request came: the 408 reads as its reply
                writer.write(reply(b"", "Connection: close", status="408 Request Timeout"))
            await writer.drain()

    server = fault_server(handle)
    answers, client = ask(server.url(), times=2, max_retries=0)
    assert answers == ["hello", "hello"]
    assert (client.stats.retries, client.stats.resent, server.connections) == (0, 1, 2)


@pytest.mark.parametrize(
    "raw",
    [
        reply(BODY, f"Content-Length: {len(BODY)}", f"Content-Length: {len(BODY)}"),
        f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + chunk(BODY)
        + chunk(b""),
        reply(BODY) + b"and stray bytes after the body\r\n",
    ],
    ids=["duplicate-content-length", "content-length-and-chunked", "bytes-after-the-body"],
)
def test_a_reply_with_broken_framing_fails_once_saying_so(fault_server, raw: bytes) -> None:
    server = fault_server(serving(raw))
    (error,), client = ask(server.url(), max_retries=3)
    assert getattr(error, "kind", None) == "bad framing", error
    assert "framing is broken" in str(error) and "HTTP 400" not in str(error)
    assert len(server.requests) == 1 and client.stats.retries == 0  # no generation asked for again


def test_a_socks_proxy_is_refused_by_its_variable_and_gets_no_request(fault_server, monkeypatch) -> None:
    socks = fault_server(serving(reply()))
    monkeypatch.setenv("ALL_PROXY", f"socks5://user:pw-Secret-123@127.0.0.1:{socks.port}")
    settings = EndpointSettings(base_url="http://judge.example/v1", model="m")
    with pytest.raises(BadInput) as refused:
        EndpointClient(settings)
    assert "ALL_PROXY=socks5://user:[secret hidden]@" in str(refused.value) and "pw-Secret" not in str(refused.value)
    assert socks.connections == 0


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/f/ok/v1\r\nX-Injected: yes", "http://127.0.0.1:9/v1\n", "http://a b/v1"]
)
def test_cr_lf_or_a_space_in_base_url_is_refused_naming_the_field(url: str) -> None:
    with pytest.raises(ValueError, match="base_url holds a space, line break or control character"):
        JudgeConfig(model="m", base_url=url)
    with pytest.raises(ValueError, match="base_url"):
        EndpointSettings(model="m", base_url=url)


def test_the_concurrency_question_goes_with_the_calls_url_and_auth(fault_server) -> None:
    token = "Basic " + base64.b64encode(b"judge-user:hunter2-Pa55").decode()

    async def handle(reader, writer, server) -> None:
        while (request := await server.next_request(reader)) is not None:
            line, headers, _ = request
            known = headers.get("authorization") == token
            if line.startswith("GET /props ") and known:
                writer.write(reply(b'{"total_slots": 4}', "Content-Type: application/json"))
            else:
                writer.write(reply(b'{"error": "no"}', status="401 Unauthorized" if not known else "404 Not Found"))
            await writer.drain()

    server = fault_server(handle)
    url = server.url().replace("http://", "http://judge-user:hunter2-Pa55@")
    client = JudgeClient(JudgeConfig(base_url=url, model="m", no_cache=True))
    try:
        assert client.resolve_concurrency()[0] == 4
    finally:
        client.close()
    assert server.requests[0][0].startswith("GET /props ")


def test_a_server_that_never_answers_the_question_is_asked_once_within_timeout_s(fault_server) -> None:
    async def handle(reader, writer, server) -> None:
        await server.next_request(reader)
        await asyncio.sleep(60)  # no headers, ever

    server = fault_server(handle)
    client = JudgeClient(JudgeConfig(base_url=server.url(), model="m", timeout_s=1.0, no_cache=True))
    started = time.monotonic()
    try:
        concurrency, source = client.resolve_concurrency()
    finally:
        client.close()
    assert concurrency == 1 and f"no answer from {server.url().removesuffix('/v1')}" in source
    assert len(server.requests) == 1 and time.monotonic() - started < 10  # one question of a second, not 3 x 5 s


def test_a_short_password_leaves_the_reply_s_numbers_alone(fault_server) -> None:
    """A secret shorter than a piece is masked whole in the reply's strings, never in the JSON around them."""
    body = json.dumps({**COMPLETION, "usage": {"prompt_tokens": 4242, "completion_tokens": 1}}).encode()
    server = fault_server(serving(reply(body)))
    url = server.url().replace("http://", "http://u:4242@")
    (answer,), client = ask(url)
    assert answer == "hello" and client.stats.tokens_in == 4242


def test_more_calls_than_the_pool_was_built_for_wait_for_the_semaphore_not_for_a_connection(fault_server) -> None:
    async def handle(reader, writer, server) -> None:  # a streamed answer that takes 1.5 s, a piece every 0.3 s
        while await server.next_request(reader) is not None:
            writer.write(sse_head())
            for piece in ("a", "n", "s", "w", "e"):
                writer.write(chunk(sse_event(delta(piece))))
                await writer.drain()
                await asyncio.sleep(0.3)
            writer.write(chunk(sse_event(delta(finish="stop"))) + chunk(sse_event("[DONE]")) + chunk(b""))
            await writer.drain()

    server = fault_server(handle)
    settings = EndpointSettings(base_url=server.url(), model="m", timeout_s=1.0, max_retries=0, concurrency=2)
    client = EndpointClient(settings)
    call = Call(body=lambda: settings.chat_request([{"role": "user", "content": "hi"}]), read=lambda r: "ok")
    try:
        assert all(o.error is None for o in client.run([call] * 2))  # the pool built, for two
        client.set_concurrency(4)  # the server said it has more slots
        outcomes = client.run([call] * 4)
    finally:
        client.close()
    assert [o.error for o in outcomes] == [None] * 4


def test_a_bad_base_url_is_refused_without_its_password() -> None:
    from whileai.config import load_recipe

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "refund_judge.yaml"
    for url in ("http://u:Passw0rdSecret9@127.0.0.1:1/v1\r\nX-Evil: 1", "ftp://u:Passw0rdSecret9@h/v1"):
        with pytest.raises(BadInput) as refused:
            load_recipe(recipe, [f"grader.judge.base_url={url}"])
        assert "Passw0rdSecret9" not in str(refused.value) and "u:[secret hidden]@" in str(refused.value)
