"""A support agent played by a served model: OpenAI-compatible chat completions with tool calling.

:func:`model_agent` points the agent protocol (``agent.start(tools=..., seed=...)``, ``episode.act(transcript)``) at
a policy served behind an OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp, OpenAI), so ``simulate`` samples real
rollouts from it. Each step sends the conversation so far with the scenario's tools, in the OpenAI format:

- the system prompt, then the customer's messages as ``user`` messages;
- each of the model's answers as the ``assistant`` message it sent (its ``tool_calls`` with their ids);
- each tool's result as ``{"role": "tool", "tool_call_id": ..., "content": "<the result as JSON>"}``.

The model's answer becomes one action. A tool call becomes a :class:`~whileai.simulations.agents.ToolCall` (several
tool calls in one answer are played one per step, in order, before the model is asked again). With
``tool_calls="json"``, an answer the server gave no structured tool call is also read for calls written as bare JSON
in its text (``whileai.integrations.tool_calls.json_tool_calls``, as training's ``model.tool_calls: json``): a small
instruct model served by llama.cpp, whose server parses no tool calls, writes them so. The model's own text then
stays its message in the history, each tool's result following it. Text without a tool call becomes a
:class:`~whileai.simulations.agents.Reply`: one that ends in a question mark waits for the customer's answer (at
most ``max_questions`` times per rollout), any other ends the conversation.

A wrong call is the model's mistake, not an exception: an unknown tool or bad arguments reach the order desk, which
answers ``{"error": ...}`` into the transcript and back to the model. Arguments that are not a JSON object are passed
as ``{"arguments_not_a_json_object": "<what the model wrote>"}``, so the desk's error names the problem.

One agent holds one :class:`~whileai.simulations.chat.ChatClient` (one connection pool) shared by all its episodes:
``simulate(..., max_workers=k)`` runs k rollouts at once on it. Every request carries a seed derived from the
rollout's seed and the step, so a server that samples deterministically per seed (vLLM) gives the same rows again.
The API key is read from the environment variable ``api_key_env`` names; every text of a reply is cleaned of it where
the reply comes in (``whileai.http.transport``), so even a server that echoes the key cannot put it in a row.

What this module does not do: run the conversation or verify it (``simulate``), play the customer (``customer``), or
serve or load a model (it only talks HTTP; ``import`` of this module imports no HTTP client).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from whileai.defaults import DEFAULT_POLICY_TEMPERATURE
from whileai.errors import BadInput
from whileai.integrations.tool_calls import json_tool_calls
from whileai.simulations.agents import Action, Event, Reply, ToolCall
from whileai.simulations.chat import ChatClient, ServedModel, endpoint_config, request_seed

__all__ = ["DEFAULT_AGENT_PROMPT", "ModelAgent", "ModelEpisode", "model_agent"]

DEFAULT_AGENT_PROMPT = (
    "You are the customer-support agent of an online shop, chatting with one customer about their orders. Use the "
    "tools to look orders up and to refund, cancel or re-address them; never guess an order id. When the request is "
    "handled, or cannot be, write one short reply to the customer saying what you did. End a reply with a question "
    "only when you need the customer's answer to go on."
)

NOT_A_JSON_OBJECT = "arguments_not_a_json_object"


def _asks_customer(text: str) -> bool:
    """Whether a reply waits for the customer: it ends with a question mark."""
    return text.rstrip().endswith("?")


class ModelAgent(ServedModel):
    """A support agent played by a served model; build it with :func:`model_agent`.

    Args:
        client: the endpoint's client, shared by every episode.
        system_prompt: the system message of every conversation.
        send_seed: send a per-request ``seed`` (turn off for a server that rejects the field).
        max_questions: replies per rollout that may wait for the customer's answer.
        asks_customer: decides whether a reply waits for the customer (default: it ends with ``?``).
        tool_calls: ``"server"``, the tool calls the server parsed; ``"json"``, also bare JSON calls in the text.
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        system_prompt: str = DEFAULT_AGENT_PROMPT,
        send_seed: bool = True,
        max_questions: int = 2,
        asks_customer: Callable[[str], bool] = _asks_customer,
        tool_calls: Literal["server", "json"] = "server",
    ) -> None:
        self.client = client
        self.system_prompt = system_prompt
        self.send_seed = send_seed
        self.max_questions = max_questions
        self.asks_customer = asks_customer
        self.tool_calls = tool_calls

    builder = "model_agent"

    def start(self, *, tools: Sequence[Mapping[str, Any]] = (), seed: int | str = 0) -> ModelEpisode:
        """Open one rollout; its requests carry seeds derived from ``seed``."""
        return ModelEpisode(self, tools, seed)


def _parse_arguments(raw: Any) -> Mapping[str, Any]:
    """A tool call's arguments: a JSON object (or "" for none); anything else is wrapped so the desk refuses it."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {NOT_A_JSON_OBJECT: raw if isinstance(raw, str) else json.dumps(raw)}


class ModelEpisode:
    """One rollout of a :class:`ModelAgent`: the chat history, and the tool calls of an answer still to be played."""

    def __init__(self, agent: ModelAgent, tools: Sequence[Mapping[str, Any]], seed: int | str) -> None:
        self._agent = agent
        self._tools = tuple(tools)
        self._seed = seed
        self._messages: list[dict[str, Any]] = [{"role": "system", "content": agent.system_prompt}]
        self._consumed = 0  # transcript events already turned into messages
        self._pending: deque[tuple[str, ToolCall]] = deque()  # calls of the last answer not yet played
        self._awaiting: deque[str] = deque()  # ids of played calls whose results have not come back yet
        self._requests = 0
        self._questions = 0

    def act(self, transcript: Sequence[Event]) -> Action:
        """The next action: a queued tool call of the model's last answer, or a new answer of the model."""
        self._read(transcript[self._consumed :])
        self._consumed = len(transcript)
        if self._pending:
            return self._play(*self._pending.popleft())

        seed = request_seed(self._seed, self._requests) if self._agent.send_seed else None
        self._requests += 1
        answer = self._agent.client.chat(self._messages, tools=self._tools, seed=seed)
        message = answer.message  # cleaned of every secret where it came in (the transport)
        calls = message.get("tool_calls") or []
        if isinstance(calls, list) and calls:
            history_calls = []
            for number, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                function = function if isinstance(function, dict) else {}
                call_id = str(call.get("id") or f"call_{self._requests}_{number}")
                name = str(function.get("name") or "")
                raw = function.get("arguments")
                raw_text = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
                history_calls.append(
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw_text}}
                )
                self._pending.append((call_id, ToolCall(name, _parse_arguments(raw_text))))
            self._messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": history_calls})
            return self._play(*self._pending.popleft())

        text = message.get("content")
        text = text if isinstance(text, str) else ""
        self._messages.append({"role": "assistant", "content": text})
        if self._agent.tool_calls == "json":
            names = [tool.get("function", {}).get("name") for tool in self._tools]
            for number, call in enumerate(json_tool_calls(text, [n for n in names if n])):
                function = call["function"]
                self._pending.append(
                    (f"call_{self._requests}_{number}", ToolCall(function["name"], function["arguments"]))
                )
            if self._pending:
                return self._play(*self._pending.popleft())
        waits = self._questions < self._agent.max_questions and self._agent.asks_customer(text)
        self._questions += int(waits)
        return Reply(text.strip(), done=not waits)

    def _play(self, call_id: str, call: ToolCall) -> ToolCall:
        self._awaiting.append(call_id)
        return call

    def _read(self, events: Sequence[Event]) -> None:
        """Add the new events to the history: customer messages and tool results (the agent's own are there)."""
        for event in events:
            if event.role == "customer":
                self._messages.append({"role": "user", "content": event.text})
            elif event.role == "tool":
                call_id = self._awaiting.popleft() if self._awaiting else f"call_unmatched_{len(self._messages)}"
                content = json.dumps(event.result, sort_keys=True, ensure_ascii=False)
                self._messages.append({"role": "tool", "tool_call_id": call_id, "content": content})


def model_agent(
    base_url: str,
    model: str,
    *,
    temperature: float = DEFAULT_POLICY_TEMPERATURE,
    system_prompt: str = DEFAULT_AGENT_PROMPT,
    send_seed: bool = True,
    max_questions: int = 2,
    tool_calls: Literal["server", "json"] = "server",
    **settings: Any,
) -> ModelAgent:
    """A support agent played by the model ``model`` served at ``base_url`` (OpenAI-compatible, tool calling on).

    Args:
        base_url: the server's base URL up to ``/v1``, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model's name, sent as the request's ``model``.
        temperature: sampling temperature (1.0, GRPO's, by default: the groups should differ).
        system_prompt: the system message.
        send_seed: send each request a ``seed`` derived from the rollout's seed and the step.
        max_questions: replies per rollout that may wait for the customer (a reply ending in ``?``).
        tool_calls: ``"server"`` plays the tool calls the server parsed; ``"json"`` also reads calls written as bare
            JSON in an answer's text (a server that parses none, such as llama.cpp's for a small model).
        settings: any other field of :class:`~whileai.http.endpoint.EndpointSettings`, with its default there:
            ``api_key_env`` (the NAME of the variable holding the key; None sends a placeholder, which a local vLLM
            without ``--api-key`` accepts), ``max_tokens``, ``extra_body`` (e.g. ``{"chat_template_kwargs":
            {"enable_thinking": False}}`` for Qwen3 on vLLM), ``timeout_s``, ``max_retries``, ``concurrency`` (at
            least ``simulate``'s ``max_workers``), ...

    Returns:
        A :class:`ModelAgent`; it opens its connection pool on the first call. ``close()`` it (or use ``with``)
        when done.

    Raises:
        BadInput: an unknown or out-of-range setting, or ``api_key_env`` names a variable that is not set.

    Example (needs a server, e.g. ``vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes``)::

        from whileai.simulations.model_agent import model_agent
        from whileai.simulations.rollouts import simulate

        with model_agent("http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B") as agent:
            rows = simulate("builtin:refunds", agent, n=8, max_workers=16)
    """
    if isinstance(max_questions, bool) or not isinstance(max_questions, int) or max_questions < 0:
        raise BadInput(f"model_agent: max_questions must be a non-negative integer, got {max_questions!r}")
    if tool_calls not in ("server", "json"):
        raise BadInput(f"model_agent: tool_calls must be 'server' or 'json', got {tool_calls!r}")
    config = endpoint_config(base_url, model, what="model_agent", temperature=temperature, **settings)
    return ModelAgent(
        ChatClient(config, role="policy"),
        system_prompt=system_prompt,
        send_seed=send_seed,
        max_questions=max_questions,
        tool_calls=tool_calls,
    )
