"""An OpenAI-compatible chat-completions server on 127.0.0.1 for the judge's tests and benchmark, scripted per request.

``JudgeServer`` answers ``POST /v1/chat/completions`` (and ``GET /v1/models``) from a real socket in a thread. Each
request takes the next scripted action (``Reply``, ``Status``, ``Raw``, ``Hang``, or a callable building one from the
request body); with the script empty it answers as ``auto_answer`` does: a judge that ranks passes by fewest tool
calls and calls a pass naming ORD-9999 a hack, like the reference page's scripted grader. Every request is recorded
with its body and headers, so a test can read exactly what reached the server. ``closed_port_url()`` gives a URL
nothing listens on. Run as a script it serves until killed (the benchmark starts it in its own process)::

    python tests/judge_server.py --delay 0.2   # prints the base URL on its first line

This is test equipment: no auth check, no streaming, no real model.
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
    """A 200 chat completion whose message content is ``content`` (a dict is sent as its JSON)."""

    content: Any
    delay: float = 0.0
    finish_reason: str = "stop"


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
                self._send(
                    200,
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "test-judge"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": action.finish_reason,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt // 4,
                            "completion_tokens": len(content) // 4,
                            "total_tokens": prompt // 4 + len(content) // 4,
                        },
                    },
                )

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
