"""No piece of the key leaves the client, whatever the server sends: a hostile judge on a raw socket echoes a random
58-character key in every way a server can (whole, in halves, in 20-character pieces, inside a stream event that is
not JSON, in a stream's error event, split over stream events a few characters at a time, in an error body and its
headers, written in JSON escapes, in an answer that is cached), and every output of ``whileai spread`` (``--json``,
``--verbose``, ``--debug``, a cached rerun), ``whileai train`` and ``whileai report``, every log record, the answer
cache and every file of the run folder are searched for any 6 characters of it; and a URL's password or token is
never shown by the simulator's endpoints either.
"""

from __future__ import annotations

import json
import logging
import random
import string
from pathlib import Path

import judge_server as judge_tools
import pytest
import yaml
from fault_server import chunk, delta, reply, sse_event, sse_head
from typer.testing import CliRunner

from whileai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "WHILEAI_PIECES_TEST_KEY"
PIECE = 6  # the shortest run of the key that counts as a piece of it (whileai.http.secrets.PIECE)
KEY = "sk-" + "".join(random.Random(58).choices(string.ascii_letters + string.digits, k=55))
runner = CliRunner()


def pieces(secret: str) -> list[str]:
    return [secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1)]


def leaks(texts: list[str], blobs: list[bytes]) -> list[str]:
    found = [p for p in pieces(KEY) for t in texts if p in t]
    return found + [p for p in pieces(KEY) for b in blobs if p.encode() in b]


def _answer(body: dict) -> dict:
    """A valid answer to the request, whose reasons quote the key."""
    answer = judge_tools.auto_answer(body)
    if isinstance(answer.get("reasons"), dict):
        answer["reasons"] = {label: f"{why}; saw {KEY[:29]} and {KEY[29:]}" for label, why in answer["reasons"].items()}
    return answer


def _completion(content: str) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


def _stream(events: list[bytes]) -> bytes:
    return sse_head() + b"".join(chunk(e) for e in events) + chunk(b"")


def hostile(number: int, body: dict) -> bytes:
    """The reply to request ``number``: each way of echoing the key in turn, two in three answering validly."""
    content = json.dumps(_answer(body))
    shape = number % 6
    if shape == 0:  # a valid streamed answer, the key split over events five characters at a time
        text = content.replace("saw ", f"saw {KEY} ", 1)
        events = [sse_event(delta(text[i : i + 5])) for i in range(0, len(text), 5)]
        return _stream([*events, sse_event(delta(finish="stop")), sse_event("[DONE]")])
    if shape == 1:  # a stream event that is not JSON
        return _stream([sse_event(f"oops, your key {KEY} is wrong"), sse_event("[DONE]")])
    if shape == 2:  # a stream's error event, the key in halves
        return _stream([sse_event({"error": {"message": f"bad key {KEY[:29]} / {KEY[29:]}"}}), sse_event("[DONE]")])
    if shape == 3:  # an error body, the key in 20-character pieces, and a header echoing it
        pieces20 = " ".join(KEY[i : i + 20] for i in range(0, len(KEY), 20))
        head = (f'WWW-Authenticate: Bearer error="{KEY}"', "Content-Type: application/json")
        return reply(json.dumps({"error": {"message": f"upstream: {pieces20}"}}).encode(), *head, status="500 Oops")
    body = json.dumps(_completion(content))
    if shape == 4:  # a valid answer, not streamed, the key written in JSON escapes: whole again once parsed
        body = body.replace(KEY[:29], "".join(f"\\u{ord(c):04x}" for c in KEY[:29]))
    # a valid answer, not streamed, its reasons quoting the key in halves: what the cache would keep
    return reply(body.encode(), "Content-Type: application/json")


def serve_hostile():
    async def handle(reader, writer, server) -> None:
        while (request := await server.next_request(reader)) is not None:
            writer.write(hostile(len(server.requests), json.loads(request[2] or b"{}")))
            await writer.drain()

    return handle


def judge_recipe(tmp_path: Path, base_url: str) -> Path:
    recipe = yaml.safe_load((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text())
    recipe["grader"] = {
        "kind": "judge",
        "judge": {
            "base_url": base_url,
            "model": "test-judge",
            "api_key_env": KEY_ENV,
            "cache_dir": str(tmp_path / "cache"),
            "concurrency": 4,
            "max_retries": 1,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.05,
            "timeout_s": 20.0,
        },
    }
    recipe["spread"]["sample"]["prompts"] = 8
    path = tmp_path / "judged.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_the_filter_takes_out_every_piece_in_every_form() -> None:
    from whileai.http.secrets import PIECE as WHILEAI_PIECE
    from whileai.http.secrets import SecretFilter

    assert WHILEAI_PIECE == PIECE
    clean = SecretFilter([KEY]).clean
    sevens = " ".join(KEY[i : i + 7] for i in range(0, len(KEY), 7))  # a server's echo in 7-character chunks
    fives = "\n".join(KEY[i : i + 5] for i in range(0, len(KEY), 5))  # or in 5, a line each
    for text in (KEY, KEY[:29] + " " + KEY[29:], json.dumps({"k": KEY}), f"x{KEY[5:13]}y", KEY[::-1] + KEY, sevens):
        assert not leaks([clean(text)], []), text
    for text in (sevens, fives):  # not a character of it left, the last short chunk included
        assert KEY[-4:] not in clean(text) and clean(text).count("[secret hidden]") == 1, clean(text)
    assert clean("nothing of it: " + KEY[: PIECE - 1]) == "nothing of it: " + KEY[: PIECE - 1]


@pytest.mark.slow
def test_no_piece_of_the_key_leaves_whatever_the_server_sends(fault_server, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.DEBUG)
    server = fault_server(serve_hostile())
    recipe = judge_recipe(tmp_path, server.url())
    rows = tmp_path / "rows.jsonl"
    rows.write_text((REPO / "recipes" / "refund_rows.jsonl").read_text())
    texts: list[str] = []
    for flags in (["--json"], ["--verbose"], [], ["--json"]):  # the last one on the cache the others filled
        result = runner.invoke(app, ["spread", str(rows), "--recipe", str(recipe), *flags])
        texts += [result.stdout, result.stderr, repr(result.exception)]
    debug = runner.invoke(app, ["--debug", "spread", str(rows), "--recipe", str(recipe), "--no-cache", "--verbose"])
    texts += [debug.stdout, debug.stderr, repr(debug.exception)]
    assert server.requests[0][1]["authorization"] == f"Bearer {KEY}"  # the key went to the server, and came back
    assert len(server.requests) >= 12  # every way of echoing it, twice at least
    assert "[secret hidden]" in " ".join(texts)

    out = tmp_path / "run"
    smoke = ["trainer.max_steps=2", "trainer.save_steps=2", "data.num_prompts=8", f"output_dir={out}"]
    trained = runner.invoke(app, ["train", str(recipe), *smoke, "--skip-spread-gate"])
    assert trained.exit_code == 0, trained.stderr
    report = runner.invoke(app, ["report", str(out)])
    texts += [trained.stdout, trained.stderr, report.stdout, report.stderr]
    texts += [record.getMessage() for record in caplog.records] + [caplog.text]
    blobs = [p.read_bytes() for folder in (out, tmp_path / "cache") for p in folder.rglob("*") if p.is_file()]
    assert any(b"judge" in blob for blob in blobs) and (tmp_path / "cache" / "judge_cache.sqlite").is_file()
    assert leaks(texts, blobs) == []


def test_the_simulator_s_endpoints_never_show_a_url_s_password_or_token(judge_tools, tmp_path) -> None:
    from whileai.http.secrets import masked_url
    from whileai.simulations.chat import ChatClient, endpoint_config

    closed = judge_tools.closed_port_url()
    for secret, url in (
        ("PASSWORD-8x7", closed.replace("://", "://user:PASSWORD-8x7@")),
        ("sk-token-as-user-1234", closed.replace("://", "://sk-token-as-user-1234@")),
    ):
        result = runner.invoke(app, ["simulate", "--agent", "model", "--base-url", url, "--model", "m",
                                     "--max-retries", "0", "--num-scenarios", "1", "--n", "1",
                                     "--out", str(tmp_path / "rows.jsonl")])  # fmt: skip
        assert result.exit_code == 4 and secret not in result.stdout + result.stderr, result.stderr
        client = ChatClient(endpoint_config(url, "m", what="model_agent"), role="agent")
        try:
            assert secret not in repr(client) and secret not in masked_url(url)
        finally:
            client.close()


def test_a_key_in_the_url_s_query_is_never_shown() -> None:
    from whileai.http.endpoint import check_base_url
    from whileai.http.secrets import masked_url

    assert "QUERYSECRET55" not in masked_url("http://127.0.0.1:9/v1?api-version=2&api_key=QUERYSECRET55")
    with pytest.raises(ValueError) as caught:  # a password with an unencoded '/' ends the host early
        check_base_url("http://user:PASS/WORD123@127.0.0.1:9/v1")
    assert "PASS" not in str(caught.value) and "percent-encoded" in str(caught.value)
