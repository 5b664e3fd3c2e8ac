"""A judge that is slow but working never times out; one that is silent does, and is not asked again while it may
still be working; calls in flight follow what the server says it runs at once.

Against raw servers on 127.0.0.1 (``fault_server``) that stream a chat completion piece by piece, go silent, cut a
stream, report an error in it, and answer llama.cpp's ``/props`` and ``/slots`` or vLLM's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fault_server import chunk, delta, read_request, reply, sse_event, sse_head

from whileai.errors import GraderUnavailable
from whileai.http.client import EndpointClient
from whileai.http.endpoint import Call, EndpointSettings, first_choice
from whileai.judge import JudgeConfig
from whileai.judge.client import CallSpec, JudgeClient, server_concurrency


def streamed(*pieces: str, gap: float = 0.0, usage: dict | None = None, done: bool = True):
    """A handler streaming ``pieces`` of one answer, ``gap`` seconds apart, for every request on a connection."""

    async def handle(reader, writer, server) -> None:
        while await server.next_request(reader) is not None:
            writer.write(sse_head())
            await writer.drain()
            for piece in pieces:
                await asyncio.sleep(gap)
                writer.write(chunk(sse_event(delta(piece))))
                await writer.drain()
            if not done:
                return  # the connection closes mid-stream
            writer.write(chunk(sse_event(delta(finish="stop"))))
            if usage is not None:
                writer.write(chunk(sse_event(delta(usage=usage))))
            writer.write(chunk(sse_event("[DONE]")) + chunk(b""))
            await writer.drain()

    return handle


def ask(url: str, **fields) -> tuple[object, EndpointClient]:
    """One streamed chat call: its answer (the message's text) or its error, and the client (for its stats)."""
    options = {"max_retries": 0, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 2.0, "stream": True}
    settings = EndpointSettings(base_url=url, model="m", **{**options, **fields})
    client = EndpointClient(settings)
    call = Call(
        body=lambda: settings.chat_request([{"role": "user", "content": "hi"}]),
        read=lambda response: first_choice(response)["message"]["content"],
    )
    try:
        (outcome,) = client.run([call])
    finally:
        client.close()
    return (outcome.error if outcome.error is not None else outcome.answer), client


def test_a_slow_answer_that_keeps_coming_is_not_timed_out(fault_server) -> None:
    # Ten pieces 0.4 s apart: 4 s in all, twice timeout_s, with no silence longer than a fifth of it.
    server = fault_server(streamed(*[f"w{i} " for i in range(10)], gap=0.4))
    answer, client = ask(server.url(), timeout_s=2.0)
    assert answer == "".join(f"w{i} " for i in range(10))
    body = json.loads(server.requests[0][2])
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert client.stats.calls == 1 and client.stats.retries == 0


def test_a_server_silent_for_timeout_s_times_out_mid_stream_and_before_its_head(fault_server) -> None:
    server = fault_server(streamed("a", "b", gap=3.0))
    answer, _ = ask(server.url(), timeout_s=0.5)
    assert getattr(answer, "kind", None) == "timeout", answer

    async def never_answers(reader, writer, server) -> None:
        await server.next_request(reader)
        await asyncio.sleep(30)

    silent = fault_server(never_answers)
    start = time.perf_counter()
    answer, _ = ask(silent.url(), timeout_s=0.5)
    assert getattr(answer, "kind", None) == "timeout" and time.perf_counter() - start < 5.0  # 10x timeout_s


def test_a_timed_out_call_closes_its_connection_before_it_is_sent_again(fault_server) -> None:
    # The server sees the first request's connection close (and could stop its work on it) before the retry
    # arrives: a retry never queues behind an abandoned request on a one-slot server.
    events: list[str] = []

    async def slow_then_fast(reader, writer, server) -> None:
        request = await server.next_request(reader)
        if request is None:
            return
        number = len(server.requests)
        events.append(f"request {number}")
        if number == 1:
            writer.write(sse_head())
            await writer.drain()
            closed = await reader.read(1)  # b"" once the client closes the connection
            events.append(f"closed {number}" if closed == b"" else f"more bytes {number}")
            return
        answer = chunk(sse_event(delta("ok", finish="stop"))) + chunk(sse_event("[DONE]")) + chunk(b"")
        writer.write(sse_head() + answer)
        await writer.drain()

    server = fault_server(slow_then_fast)
    answer, client = ask(server.url(), timeout_s=0.5, max_retries=1)
    assert answer == "ok" and client.stats.retries == 1
    assert events == ["request 1", "closed 1", "request 2"]


def test_a_stream_cut_before_its_end_is_retried_and_an_error_in_it_counted(fault_server) -> None:
    cut = fault_server(streamed("half", done=False))
    answer, client = ask(cut.url(), max_retries=1)
    assert getattr(answer, "kind", None) == "connection" and client.stats.calls == 2

    async def error_event(reader, writer, server) -> None:
        while await server.next_request(reader) is not None:
            body = sse_event({"error": {"message": "engine died"}}) + sse_event("[DONE]")
            writer.write(sse_head() + chunk(body) + chunk(b""))
            await writer.drain()

    failing = fault_server(error_event)
    answer, _ = ask(failing.url())
    assert getattr(answer, "kind", None) == "bad response" and "engine died" in str(answer)


def test_streamed_tokens_are_counted_as_they_come_and_corrected_by_the_usage(fault_server) -> None:
    server = fault_server(streamed("a", "b", "c", usage={"prompt_tokens": 12, "completion_tokens": 5}))
    answer, client = ask(server.url())
    assert answer == "abc" and (client.stats.tokens_in, client.stats.tokens_out) == (12, 5)
    plain = fault_server(streamed("a", "b", "c"))  # no usage: the pieces are the estimate
    answer, client = ask(plain.url())
    assert answer == "abc" and client.stats.tokens_out == 3


def test_a_server_that_ignores_stream_is_read_whole(fault_server) -> None:
    async def whole(reader, writer, server) -> None:
        while await server.next_request(reader) is not None:
            writer.write(reply())
            await writer.drain()

    answer, _ = ask(fault_server(whole).url())
    assert answer == "hello"


# ---------------------------------------------------------------- how many at once


def judge_server_with(endpoints: dict[str, tuple[int, str]], answer: dict, hold: float = 0.2):
    """A judge on raw sockets: GETs answered from ``endpoints``, every chat call answered with ``answer`` after
    ``hold`` seconds; the most calls it held at once is ``state["peak"]``."""
    state = {"now": 0, "peak": 0}

    async def handle(reader, writer, server) -> None:
        while (request := await read_request(reader)) is not None:
            line = request[0]
            path = line.split()[1]
            if line.startswith("GET"):
                status, text = endpoints.get(path, (404, "not found"))
                writer.write(reply(text.encode(), status=f"{status} X"))
                await writer.drain()
                continue
            server.requests.append(request)
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            await asyncio.sleep(hold)
            state["now"] -= 1
            content = json.dumps(answer)
            completion = {"choices": [{"index": 0, "message": {"content": content}, "finish_reason": "stop"}]}
            writer.write(reply(json.dumps(completion).encode(), "Content-Type: application/json"))
            await writer.drain()

    return handle, state


RUBRIC = {"solution": ["the right order"], "behavior": ["looked it up first"]}


def rubric_specs(n: int) -> list[CallSpec]:
    return [
        CallSpec("rubric", [{"role": "user", "content": f"task {i}"}], {}, lambda text: json.loads(text), f"k{i}")
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("endpoints", "expected", "source"),
    [
        ({"/props": (200, json.dumps({"total_slots": 1, "n_ctx": 8192}))}, 1, "llama.cpp /props total_slots"),
        ({"/slots": (200, json.dumps([{"id": 0}, {"id": 1}, {"id": 2}]))}, 3, "llama.cpp /slots"),
        ({}, 1, "a server on this machine"),
    ],
)
def test_calls_in_flight_follow_the_servers_slots(fault_server, tmp_path, endpoints, expected, source) -> None:
    handle, state = judge_server_with(endpoints, RUBRIC)
    server = fault_server(handle)
    config = JudgeConfig(base_url=server.url(), model="m", timeout_s=5.0, cache_dir=str(tmp_path))
    client = JudgeClient(config)
    try:
        outcomes = client.run(rubric_specs(6))
        assert all(o.error is None for o in outcomes)
        assert state["peak"] == expected and client.concurrency == expected
        assert source in client.plan() and f"{expected} call(s) at once" in client.plan()
        assert client.stats.as_dict()["concurrency"] == expected
    finally:
        client.close()


def test_the_config_s_concurrency_wins_and_vllm_metrics_or_a_remote_get_the_large_default() -> None:
    config = JudgeConfig(base_url="http://127.0.0.1:1/v1", model="m", concurrency=5)
    client = JudgeClient(config)
    assert client.resolve_concurrency() == (5, "grader.judge.concurrency")
    client.close()
    metrics = {"http://10.0.0.5:8000/metrics": (200, "# HELP vllm:num_requests_running\nvllm:num_requests_running 0\n")}
    assert server_concurrency(metrics.get, "http://10.0.0.5:8000/v1")[0] == 256
    assert server_concurrency(lambda url: None, "https://api.example.com/v1")[0] == 256
    assert server_concurrency(lambda url: None, "http://localhost:8080/v1")[0] == 1


def test_a_one_slot_server_is_not_buried_under_a_batch(fault_server, tmp_path) -> None:
    # 8 calls at a server with one slot that takes 0.3 s each: one at a time, all answered, none timed out, with a
    # timeout_s shorter than the batch (a queue of 8 on the server would time out all but the first).
    handle, state = judge_server_with({"/props": (200, json.dumps({"total_slots": 1}))}, RUBRIC, hold=0.3)
    server = fault_server(handle)
    config = JudgeConfig(base_url=server.url(), model="m", timeout_s=1.0, max_retries=0, cache_dir=str(tmp_path))
    client = JudgeClient(config)
    try:
        outcomes = client.run(rubric_specs(8))
    finally:
        client.close()
    assert [o.error for o in outcomes] == [None] * 8 and state["peak"] == 1


def test_an_unanswering_judge_s_error_names_what_to_try(fault_server, tmp_path) -> None:
    async def never_answers(reader, writer, server) -> None:
        while (request := await read_request(reader)) is not None:
            if request[0].startswith("GET"):
                writer.write(reply(b"{}", status="404 X"))
                await writer.drain()
                continue
            await asyncio.sleep(30)

    server = fault_server(never_answers)
    config = JudgeConfig(base_url=server.url(), model="m", timeout_s=0.3, max_retries=0, cache_dir=str(tmp_path))
    client = JudgeClient(config)
    try:
        with pytest.raises(GraderUnavailable) as caught:
            client.run(rubric_specs(2))
    finally:
        client.close()
    text = str(caught.value)
    # one call at a time already (the server says no slots): time is the advice, not fewer calls
    assert "answered none of 2" in text and "grader.judge.concurrency=1" not in text and "timeout_s" in text
    assert "--parallel" not in text and "a faster server or smaller model" in text
    closed = JudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, concurrency=1, no_cache=True)
    client = JudgeClient(closed)
    try:
        with pytest.raises(GraderUnavailable, match="Is the server up at"):
            client.run(rubric_specs(1))
    finally:
        client.close()
