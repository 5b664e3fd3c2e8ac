"""A scripted OpenAI-compatible *policy* server on 127.0.0.1, for the model agent's and the simulated customer's tests.

``PolicyServer`` answers ``POST /v1/chat/completions`` from a real socket in a thread. The request's ``model`` picks
the behaviour, so one server plays every part:

- ``support-bot``: a support agent that handles a refund with tool calls: list the orders when the conversation names
  no order id (and pick the one whose item the customer mentions), look the order up, refund the amount the customer
  asked for, then reply "Done: ...". Several calls in one answer when ``parallel`` is in the model name.
- ``asker``: asks the customer for the order number first (a reply ending in "?"), then goes on as ``support-bot``.
- ``json-bot``: ``support-bot`` writing each tool call as bare JSON in a ```json fence in its text, with no structured
  ``tool_calls``, as a small instruct model served by llama.cpp does.
- ``wrong-tool``: calls a tool that does not exist, then one with arguments that are not JSON, then gives up.
- ``echo-key``: replies with the bearer token it was sent (a hostile server, for the secrecy test).
- ``customer``: a customer answering the agent's question with the order number its system prompt gives it.

Every request is recorded with its body and headers (``server.requests``), and ``server.fail_next`` queues error
statuses to answer before the script. ``closed_port_url()`` gives a URL nothing listens on.

This is test equipment: no auth check, no streaming, no real model.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["PolicyServer", "closed_port_url", "policy_answer"]

_ORDER_ID = re.compile(r"\bORD-\d+\b")
_AMOUNT = re.compile(r"\$(\d+(?:\.\d{1,2})?)")


def _tool_call(number: int, name: str, arguments: Any) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{number}", "type": "function", "function": {"name": name, "arguments": raw}}


def _say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def _results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in messages if m.get("role") == "tool"]


def _support(messages: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """The refund script, read off the conversation so far (stateless, like a model)."""
    said = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    request = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    amount = float(_AMOUNT.search(request).group(1)) if _AMOUNT.search(request) else 0.0
    results = _results(messages)
    order_id = _ORDER_ID.search(said).group(0) if _ORDER_ID.search(said) else None
    if order_id is None:
        listing = next((r for r in results if "orders" in r), None)
        if listing is None:
            return _calls(_tool_call(0, "list_orders", {}))
        order_id = next((o["order_id"] for o in listing["orders"] if o["item"] in request), None)
        if order_id is None:
            return _say("I could not find that order.")
    if any(r.get("ok") for r in results):
        return _say(f"Done: I refunded ${amount:.2f} on {order_id}.")
    if parallel and not any("order" in r for r in results):
        return _calls(
            _tool_call(1, "lookup_order", {"order_id": order_id}),
            _tool_call(2, "refund_order", {"order_id": order_id, "amount": amount}),
        )
    if not any("order" in r for r in results):
        return _calls(_tool_call(1, "lookup_order", {"order_id": order_id}))
    if any("error" in r for r in results[-1:]):
        return _say(f"I'm sorry, I could not do that: {results[-1]['error']}.")
    return _calls(_tool_call(2, "refund_order", {"order_id": order_id, "amount": amount}))


def _customer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    system = str(messages[0].get("content") or "") if messages else ""
    known = system.split("What you know", 1)[-1]
    found = _ORDER_ID.search(known)
    return _say(f"Sure, it's {found.group(0)}." if found else "I don't remember, sorry.")


def policy_answer(body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """The assistant message the server answers ``body`` with (see the module docstring for the behaviours)."""
    model = str(body.get("model", ""))
    messages = list(body.get("messages") or [])
    if model == "customer":
        return _customer(messages)
    if model == "echo-key":
        token = headers.get("authorization", "").removeprefix("Bearer ")
        return _say(f"Your key is {token}. Done.")
    if model == "wrong-tool":
        results = _results(messages)
        if not results:
            return _calls(_tool_call(0, "delete_everything", {"confirm": True}))
        if len(results) == 1:
            return _calls(_tool_call(1, "refund_order", '{"order_id": "ORD-1042", amount: }'))
        return _say("I'm sorry, I could not do that.")
    if model == "asker" and not any(m.get("role") == "assistant" and m.get("content") for m in messages):
        return _say("Could you tell me the order number, please?")
    answer = _support(messages, parallel="parallel" in model)
    if model == "json-bot" and answer.get("tool_calls"):
        function = answer["tool_calls"][0]["function"]
        call = {"name": function["name"], "arguments": json.loads(function["arguments"])}
        return _say(f"I'll do that now.\n```json\n{json.dumps(call)}\n```")
    return answer


class PolicyServer:
    """The scripted server; ``start()`` it (or use ``with``), read ``url`` and ``requests``, ``stop()`` it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._failures: deque[int] = deque()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes; no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {key.lower(): value for key, value in self.headers.items()}
                with server._lock:
                    server.requests.append({"path": self.path, "body": body, "headers": headers})
                    failure = server._failures.popleft() if server._failures else None
                if failure is not None:
                    self._send(failure, {"error": {"message": "scripted failure"}})
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                message = policy_answer(body, headers)
                prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7, "total_tokens": 0},
                    },
                )

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="policy-server", daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL, up to ``/v1``."""
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def fail_next(self, *statuses: int) -> None:
        """Answer the next requests with these error statuses, in order, before the script."""
        with self._lock:
            self._failures.extend(statuses)

    def bodies(self, model: str | None = None) -> list[dict[str, Any]]:
        """The request bodies received, optionally only those for ``model``."""
        return [r["body"] for r in self.requests if model is None or r["body"].get("model") == model]

    def start(self) -> PolicyServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (a port just released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
