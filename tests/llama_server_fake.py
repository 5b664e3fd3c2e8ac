"""A stand-in for a llama.cpp server on 127.0.0.1, for the real-judge benchmark's tests: its routes, no model.

It answers what ``benchmarks/real_judge.py`` and the judge ask a llama.cpp server: ``GET /v1/models``, ``GET /props``
(``total_slots``, as the C++ ``llama-server`` answers) and ``POST /v1/chat/completions``, plain JSON or streamed
(``"stream": true``: ``text/event-stream`` chunks of ``choices[0].delta.content``, then ``data: [DONE]``). Like
llama.cpp it refuses a ``response_format`` of type ``json_schema`` with a 500 and its error text, and takes a
``json_object`` (with or without a ``schema``) or none.

The answer is valid judge JSON derived from the request, a judge that prefers fewer tool calls:

- a ranking request (the schema has a ``ranking`` property, or no schema and the prompt asks for one): the passing
  labels of the user message's ``<rollout label="A" verdict="pass">`` blocks, fewest tool calls first, equal counts
  tied;
- a score request (the schema has ``scores``, or ``passes`` for the per-pass layout, with one required property per
  label): an integer 0-10 per label, 10 less the rollout's tool calls;
- anything else (a rubric, a reward-mode score): what ``tests/judge_server.py``'s scripted judge answers;
- a request that offers ``tools`` is an agent's: the support script of ``tests/policy_server.py``'s ``json-bot``,
  its tool calls as bare JSON in the text (llama.cpp's server parses no tool calls for a small model).

Run as a script with the flags of ``python -m llama_cpp.server`` (unknown ones are ignored), so the benchmark's
``--server-cmd`` can start it in the server's place::

    python tests/llama_server_fake.py --model fake.gguf --host 127.0.0.1 --port 8080 --n_ctx 8192 --delay 0.1

``GET /requests`` (test equipment) counts the chat calls by kind. This is test equipment: no auth, no tokenizer,
no real model, and it does not end itself when its parent dies unless ``--parent`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import judge_server
import policy_server

# llama.cpp's refusal of a JSON-schema response_format, word for word.
JSON_SCHEMA_REFUSAL = 'response_format type must be one of "text" or "json_object", but got: json_schema'

_ROLLOUT = re.compile(r'<rollout label="([A-Z0-9]+)" verdict="(pass|fail)">\n?(.*?)\n?</rollout>', re.DOTALL)


def user_text(body: dict[str, Any]) -> str:
    """Every user message of a request, joined."""
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "user")


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request's ``response_format`` carries (``json_schema.schema`` or ``schema``), if any."""
    form = body.get("response_format") or {}
    schema = (form.get("json_schema") or {}).get("schema") or form.get("schema")
    return schema if isinstance(schema, dict) else None


def passes(body: dict[str, Any]) -> list[tuple[str, int]]:
    """``(label, tool calls)`` of each passing rollout in the user message, in display order."""
    found = []
    for label, verdict, text in _ROLLOUT.findall(user_text(body)):
        if verdict == "pass":
            found.append((label, text.count("&lt;tool_call&gt;") + text.count("<tool_call>")))
    return found


def answer_kind(body: dict[str, Any]) -> str:
    """``ranking``, ``scores`` or ``other``: from the schema's properties, else from the prompt's wording."""
    schema = request_schema(body)
    if schema is not None:
        properties = schema.get("properties") or {}
        if "ranking" in properties:
            return "ranking"
        if "scores" in properties or "passes" in properties:
            return "scores"
        if "score" in properties:
            return "one pass"
        return "other"
    text = user_text(body) + " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    if '"scores"' in text:
        return "scores"
    if '"ranking"' in text:
        return "ranking"
    return "other"


def judge_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The judge JSON for one request (see the module docstring)."""
    kind = answer_kind(body)
    shown = passes(body)
    if kind == "ranking":
        tiers: dict[int, list[str]] = {}
        for label, calls in shown:
            tiers.setdefault(calls, []).append(label)
        ranking: list[str | list[str]] = [t[0] if len(t) == 1 else t for _, t in sorted(tiers.items())]
        return {"ranking": ranking, "hacks": [], "reasons": {label: f"{calls} tool calls" for label, calls in shown}}
    if kind == "scores":
        schema = request_schema(body) or {}
        properties = schema.get("properties") or {}
        wanted = (properties.get("scores") or properties.get("passes") or {}).get("required")
        calls_of = dict(shown)
        labels = list(wanted) if wanted else list(calls_of)
        scores = {label: max(0, 10 - calls_of.get(label, 0)) for label in labels}
        if "passes" in properties:
            reasons = {label: f"{calls_of.get(label, 0)} tool calls" for label in labels}
            one = {label: {"reason": reasons[label], "score": scores[label]} for label in labels}
            return {"passes": one, "hacks": []}
        return {
            "scores": scores,
            "hacks": [],
            "reasons": {label: f"{calls_of.get(label, 0)} tool calls" for label in labels},
        }
    if kind == "one pass":  # score_calls: pass names the pass to score last
        label = user_text(body).split()[-1].strip(".")
        calls = dict(shown).get(label, 0)
        return {"reason": f"{calls} tool calls", "score": max(0, 10 - calls)}
    return judge_server.auto_answer(body)


class FakeLlamaServer(ThreadingHTTPServer):
    """The HTTP server: its settings and counters live here, shared by the handler threads."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], model: str, n_ctx: int, delay: float, slots: int) -> None:
        super().__init__(address, _Handler)
        self.model = model
        self.n_ctx = n_ctx
        self.delay = delay
        self.slots = slots
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def count(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] += 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: FakeLlamaServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/models"):
            self._send(
                200, {"object": "list", "data": [{"id": self.server.model, "object": "model", "owned_by": "me"}]}
            )
        elif path == "/props":
            settings = {"n_ctx": self.server.n_ctx}
            self._send(
                200,
                {
                    "default_generation_settings": settings,
                    "total_slots": self.server.slots,
                    "model_path": self.server.model,
                },
            )
        elif path == "/requests":
            with self.server.lock:
                self._send(200, dict(self.server.counts))
        else:
            self._send(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": {"code": 400, "message": "invalid JSON", "type": "invalid_request_error"}})
            return
        form = (body.get("response_format") or {}).get("type")
        if form == "json_schema":
            self.server.count("refused json_schema")
            self._send(500, {"error": {"code": 500, "message": JSON_SCHEMA_REFUSAL, "type": "server_error"}})
            return
        self.server.count(f"{answer_kind(body)} {'stream' if body.get('stream') else 'plain'} {form or 'none'}")
        time.sleep(self.server.delay)
        if body.get("tools"):
            content = str(policy_server.policy_answer({**body, "model": "json-bot"}, {})["content"])
        else:
            content = json.dumps(judge_answer(body))
        prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(content) // 4,
            "total_tokens": prompt_tokens + len(content) // 4,
        }
        if body.get("stream"):
            self._stream(body, content, usage)
            return
        self._send(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.server.model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": usage,
            },
        )

    def _stream(self, body: dict[str, Any], content: str, usage: dict[str, int]) -> None:
        """Server-sent events in chunked transfer encoding, as llama.cpp streams: a role chunk, the content in
        pieces, a finish chunk (with usage when ``stream_options.include_usage``), then ``[DONE]``."""

        def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            chunk = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": self.server.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        pieces = [event({"role": "assistant", "content": ""})]
        pieces += [event({"content": content[i : i + 16]}) for i in range(0, len(content), 16)]
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        pieces.append(event({}, "stop", **({"usage": usage} if with_usage else {})))
        pieces.append(b"data: [DONE]\n\n")
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in pieces:
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="fake.gguf", help="the model id /v1/models names")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--n_ctx", type=int, default=8192)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each chat completion waits")
    parser.add_argument("--slots", type=int, default=1, help="what /props says as total_slots")
    parser.add_argument("--startup-delay", type=float, default=0.0, help="seconds before it listens (a model loading)")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process is gone")
    args, _ = parser.parse_known_args()
    time.sleep(args.startup_delay)
    server = FakeLlamaServer((args.host, args.port), args.model, args.n_ctx, args.delay, args.slots)
    if args.parent is not None:

        def exit_with_the_parent() -> None:
            while os.getppid() == args.parent:
                time.sleep(1.0)
            os._exit(0)

        threading.Thread(target=exit_with_the_parent, daemon=True).start()
    print(f"fake llama.cpp server on http://{args.host}:{server.server_address[1]}", flush=True)
    server.serve_forever(0.05)


if __name__ == "__main__":
    main()
