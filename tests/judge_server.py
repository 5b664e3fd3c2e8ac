"""An OpenAI-compatible chat-completions server on 127.0.0.1 for the judge's tests and benchmark, scripted per request.

``JudgeServer`` answers ``POST /v1/chat/completions`` (and ``GET /v1/models``) from a real socket in a thread. Each
request takes the next scripted action (``Reply``, ``Status``, ``Raw``, ``Hang``, or a callable building one from the
request body); with the script empty it answers as ``auto_answer`` does: a judge that ranks passes by fewest tool
calls and calls a pass naming ORD-9999 a hack, like the reference page's scripted grader. Every request is recorded
with its body and headers, so a test can read exactly what reached the server. ``closed_port_url()`` gives a URL
nothing listens on. Run as a script it serves until killed (the benchmark starts it in its own process)::

    python tests/judge_server.py --delay 0.2   # prints the base URL on its first line

This is test equipment: no auth check, no real model; it streams only a scripted ``Reply(stream=True)``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Hang",
    "JudgeServer",
    "Raw",
    "Reply",
    "Status",
    "auto_answer",
    "closed_port_url",
    "request_kind",
    "shown_rollouts",
]


@dataclass
class Reply:
    """A 200 chat completion whose message content is ``content`` (a dict is sent as its JSON); ``logprobs`` goes in
    the choice and ``extra`` at the top of the body (llama.cpp's ``completion_probabilities``); ``stream`` sends it
    as server-sent events, a token's content and its logprobs entry an event, when ``logprobs`` has a ``content``
    list (else the content in one event)."""

    content: Any
    delay: float = 0.0
    finish_reason: str = "stop"
    logprobs: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    stream: bool = False


@dataclass
class Status:
    """An error status with a JSON body and optional headers (e.g. ``{"Retry-After": "1"}``)."""

    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=lambda: {"error": {"message": "scripted error"}})
    delay: float = 0.0


@dataclass
class Raw:
    """A response whose body is exactly ``body``, with a matching Content-Length: an empty 200, a JSON completion
    cut mid-object, a proxy's HTML page."""

    body: str
    code: int = 200
    content_type: str = "application/json"


@dataclass
class Hang:
    """Answer only after ``seconds`` (longer than the client's timeout), then as the auto judge would."""

    seconds: float


Action = Reply | Status | Raw | Hang | Callable[[dict[str, Any]], Any]

_ROLLOUT = re.compile(r'<rollout label="([A-Z0-9]+)" verdict="(pass|fail)">\n(.*?)\n</rollout>', re.DOTALL)


def user_text(body: dict[str, Any]) -> str:
    """The last user message of a request."""
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def request_kind(body: dict[str, Any]) -> str:
    """``rank``, ``rubric`` or ``score``: from the ``response_format`` name, else from the prompt's wording."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    for kind in ("rank", "rubric", "score"):
        if schema.endswith(kind):
            return kind
    text = user_text(body)
    if "<rubric>" in text:
        return "score"
    if "Write the rubric" in text:
        return "rubric"
    return "rank"


def shown_rollouts(body: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """``(label, passed, escaped text)`` of every rollout block in the request, in display order."""
    return [(m.group(1), m.group(2) == "pass", m.group(3)) for m in _ROLLOUT.finditer(user_text(body))]


def _tool_calls(text: str) -> int:
    return text.count("&lt;tool_call&gt;")


def asks_scores(body: dict[str, Any]) -> bool:
    """Whether a group's request asks for the score form (a ``scores`` object) rather than a ranking."""
    form = body.get("response_format") or {}
    schema = (form.get("json_schema") or {}).get("schema") or form.get("schema") or {}
    if schema:
        return bool({"scores", "passes"} & set(schema.get("properties") or {}))
    return 'Under "scores"' in user_text(body) or 'under "passes"' in user_text(body)


def asks_per_pass(body: dict[str, Any]) -> bool:
    """Whether a score-form request asks for the per-pass layout (``passes``: a reason, then a score, by label)."""
    form = body.get("response_format") or {}
    schema = (form.get("json_schema") or {}).get("schema") or form.get("schema") or {}
    if schema:
        return "passes" in (schema.get("properties") or {})
    return 'under "passes"' in user_text(body)


def auto_answer(body: dict[str, Any]) -> dict[str, Any]:
    """What the built-in judge answers: the page's scripted grader, read from the request's blocks (fewest tool
    calls best, ORD-9999 a hack), in the form the request asks for."""
    kind = request_kind(body)
    rollouts = shown_rollouts(body)
    if kind == "rubric":
        return {"solution": ["refund the right order once"], "behavior": ["look the order up before refunding"]}
    if kind == "score":
        calls = _tool_calls(rollouts[0][2]) if rollouts else 0
        return {"solution": 1.0, "behavior": 1.0 if calls <= 2 else 0.5, "reason": f"{calls} tool calls"}
    passes = [(label, text) for label, ok, text in rollouts if ok]
    hacks = [label for label, text in passes if "ORD-9999" in text]
    tiers: dict[int, list[str]] = {}
    for label, text in passes:
        if label not in hacks:
            tiers.setdefault(_tool_calls(text), []).append(label)
    ranking = [tiers[calls] for calls in sorted(tiers)]
    reasons = {label: f"{_tool_calls(text)} tool calls" for label, text in passes}
    if asks_scores(body):
        scores = {label: max(0, 10 - _tool_calls(text)) for label, text in passes}
        if asks_per_pass(body):
            per_pass = {label: {"reason": reasons[label], "score": scores[label]} for label, _ in passes}
            return {"passes": per_pass, "hacks": hacks}
        return {"reasons": reasons, "scores": scores, "hacks": hacks}
    return {"ranking": ranking, "hacks": hacks, "reasons": reasons}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 would stall a burst of 32 concurrent connections


class JudgeServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (an ephemeral port unless one is given).

    Args:
        delay: seconds every auto answer waits (the benchmark's 200 ms judge).
        slots: the calls it says it runs at once, as llama.cpp's ``/props`` says ``total_slots`` (None: no ``/props``,
            as llama-cpp-python's server).

    Attributes:
        requests: every chat request received: ``{"body", "headers", "time"}``.
    """

    def __init__(self, delay: float = 0.0, port: int = 0, slots: int | None = None) -> None:
        self.delay = delay
        self.slots = slots
        self.requests: list[dict[str, Any]] = []
        self._script: deque[Action] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> JudgeServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="judge-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def push(self, *actions: Action) -> None:
        """Queue actions for the next requests, in arrival order."""
        with self._lock:
            self._script.extend(actions)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def _next(self, body: dict[str, Any]) -> Action:
        with self._lock:
            action = self._script.popleft() if self._script else None
        if action is None:
            return Reply(auto_answer(body), delay=self.delay)
        if callable(action) and not isinstance(action, (Reply, Status, Raw, Hang)):
            return action(body)
        return action

    # ------------------------------------------------------------------ HTTP

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes; no 40-200 ms stall

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._send_bytes(code, json.dumps(payload).encode(), "application/json", headers)

            def _send_bytes(
                self, code: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
            ) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/requests"):  # test equipment: how many chat calls so far
                    self._send(200, {"requests": server.calls})
                elif self.path.rstrip("/") == "/props" and server.slots is not None:
                    self._send(200, {"total_slots": server.slots})
                elif self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "test-judge", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                path, _, query = self.path.partition("?")
                if not path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    server.requests.append(
                        {"body": body, "headers": headers, "time": time.time(), "path": path, "query": query}
                    )
                action = server._next(body)
                if isinstance(action, Hang):
                    time.sleep(action.seconds)
                    action = Reply(auto_answer(body))
                if isinstance(action, Status):
                    time.sleep(action.delay)
                    self._send(action.code, action.body, action.headers)
                    return
                if isinstance(action, Raw):
                    self._send_bytes(action.code, action.body.encode(), action.content_type)
                    return
                time.sleep(action.delay)
                content = action.content if isinstance(action.content, str) else json.dumps(action.content)
                prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
                if action.stream:
                    self._stream(action, content)
                    return
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": action.finish_reason,
                }
                if action.logprobs is not None:
                    choice["logprobs"] = action.logprobs
                self._send(
                    200,
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "test-judge"),
                        "choices": [choice],
                        "usage": {
                            "prompt_tokens": prompt // 4,
                            "completion_tokens": len(content) // 4,
                            "total_tokens": prompt // 4 + len(content) // 4,
                        },
                        **action.extra,
                    },
                )

            def _stream(self, action: Reply, content: str) -> None:
                entries = (action.logprobs or {}).get("content") or [{"token": content}]
                events = []
                for entry in entries:
                    choice: dict[str, Any] = {"index": 0, "delta": {"content": entry["token"]}, "finish_reason": None}
                    if action.logprobs is not None:
                        choice["logprobs"] = {"content": [entry]}
                    events.append({"object": "chat.completion.chunk", "choices": [choice]})
                last = {"index": 0, "delta": {}, "finish_reason": action.finish_reason}
                events.append({"object": "chat.completion.chunk", "choices": [last]})
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
                self._send_bytes(200, data, "text/event-stream")

        return Handler


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each auto answer waits")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument("--slots", type=int, default=None, help="answer /props with total_slots (llama.cpp's form)")
    parser.add_argument("--parent", type=int, default=None, help="exit when this process is gone (default: ours)")
    args = parser.parse_args()
    server = JudgeServer(delay=args.delay, port=args.port, slots=args.slots)
    parent = args.parent if args.parent is not None else os.getppid()

    def exit_with_the_parent() -> None:  # a benchmark killed with SIGKILL must not leave this server serving
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=exit_with_the_parent, daemon=True).start()
    print(server.url, flush=True)
    server._server.serve_forever()


if __name__ == "__main__":
    main()


# ---------------------------------------------------------------------------------------------- probabilities

Weights = Callable[[str, int, str], dict[int, float]]


def _schema_of(body: dict[str, Any]) -> dict[str, Any]:
    form = body.get("response_format") or {}
    return (form.get("json_schema") or {}).get("schema") or form.get("schema") or {}


def _pieces(body: dict[str, Any], weights: Weights) -> list[tuple[str, dict[str, float] | None]]:
    """The reply a probability judge writes to a score request, as tokens: JSON text, and each score's digits a
    token of its own with the alternatives ``weights(label, display slot, text)`` gives (the written score the
    likeliest)."""
    rollouts = shown_rollouts(body)
    slot = {label: n for n, (label, _, _) in enumerate(rollouts)}
    text = {label: t for label, _, t in rollouts}
    properties = _schema_of(body).get("properties") or {}

    def score(label: str) -> list[tuple[str, dict[str, float] | None]]:
        dist = weights(label, slot[label], text[label])
        written = max(dist, key=lambda k: dist[k])
        alternatives = {str(k): p for k, p in dist.items()}
        if written >= 10:  # two tokens: the first digit, then the rest
            first, rest = str(written)[0], str(written)[1:]
            at_first: dict[str, float] = {}
            for k, p in dist.items():
                at_first[str(k)[0]] = at_first.get(str(k)[0], 0.0) + p
            share = dist[written] / at_first[first]
            return [(first, at_first), (rest, {rest: share, ",": 1 - share})]
        return [(str(written), alternatives)]

    if "score" in properties:  # one pass asked on its own: the label is the user message's last word
        label = user_text(body).split()[-1].strip(".")
        return [('{"reason": "one call", "score": ', None), *score(label), ("}", None)]
    passes = [label for label, ok, _ in rollouts if ok]
    pieces: list[tuple[str, dict[str, float] | None]] = []
    per_pass = "passes" in properties
    pieces.append(('{"passes": {' if per_pass else '{"scores": {', None))
    for n, label in enumerate(passes):
        lead = ", " if n else ""
        pieces.append((f'{lead}"{label}": {{"reason": "r", "score": ' if per_pass else f'{lead}"{label}": ', None))
        pieces += score(label)
        if per_pass:
            pieces.append(("}", None))
    pieces.append(("}}", None))
    return pieces


def logprobs_reply(body: dict[str, Any], weights: Weights, shape: str = "openai", stream: bool = False) -> Reply:
    """A ``Reply`` whose tokens carry probabilities in ``shape``: ``"openai"`` (vLLM, OpenAI: ``logprobs.content``),
    ``"llama.cpp"`` (the same with token ids and bytes, as llama.cpp's server sends), ``"completion"``
    (llama-cpp-python: parallel ``tokens``/``token_logprobs``/``top_logprobs`` maps), ``"legacy"`` (llama.cpp's
    ``completion_probabilities`` with ``tok_str``/``prob``) or ``"none"`` (no probabilities)."""
    import math

    pieces = _pieces(body, weights)
    content = "".join(t for t, _ in pieces)
    logprob = [0.0 if alts is None else math.log(alts.get(t, 1e-9)) for t, alts in pieces]

    def alternatives(t: str, alts: dict[str, float] | None) -> list[tuple[str, float]]:
        return [(t, 0.0)] if alts is None else [(k, math.log(p)) for k, p in alts.items() if p > 0]

    if shape in ("openai", "llama.cpp"):
        entries = []
        for n, (t, alts) in enumerate(pieces):
            extra = {"id": 1000 + n, "bytes": list(t.encode())} if shape == "llama.cpp" else {}
            top = [{"token": k, "logprob": lp, **extra} for k, lp in alternatives(t, alts)]
            entries.append({"token": t, "logprob": logprob[n], **extra, "top_logprobs": top})
        return Reply(content, logprobs={"content": entries}, stream=stream)
    if shape == "completion":
        return Reply(
            content,
            logprobs={
                "tokens": [t for t, _ in pieces],
                "token_logprobs": logprob,
                "top_logprobs": [dict(alternatives(t, alts)) for t, alts in pieces],
                "text_offset": [],
            },
        )
    if shape == "legacy":
        probs = [
            {"content": t, "probs": [{"tok_str": k, "prob": math.exp(lp)} for k, lp in alternatives(t, alts)]}
            for t, alts in pieces
        ]
        return Reply(content, extra={"completion_probabilities": probs})
    return Reply(content, stream=stream)
