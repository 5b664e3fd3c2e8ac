"""The simulated customer (``simulate(..., simulator=True)``): a served model plays the customer of a scenario.

Without a simulator the customer's later turns are scripted: any question gets the scenario's ``customer_reply``.
With one, :func:`customer_model` has an LLM answer each of the agent's questions in character. It is told the
customer's first message (the scenario's ``prompt``) and what the customer knows but has not said yet (the scripted
``customer_reply``: the order number and item), and sees the conversation from the customer's side: the agent's
messages as ``user`` turns, its own earlier answers as ``assistant`` turns. Tool calls and their results happen
behind the support desk, so the customer never sees them. Nothing the verifier checks (``scenario.goal``) is shown.

The protocol ``simulate`` uses is two methods, like the agent's: ``customer.start(scenario, seed=...)`` opens one
rollout's customer and ``episode.reply(transcript) -> str`` answers the agent's last message. Any object with them
plugs in (a scripted customer in a test, a different persona prompt).

What this module does not do: decide when the customer speaks (``simulate`` asks it after each reply of the agent
that waits for an answer), or end the conversation (only the agent does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from whileai.defaults import CUSTOMER_MAX_TOKENS, DEFAULT_CUSTOMER_TEMPERATURE
from whileai.errors import BadInput
from whileai.simulations.agents import Event
from whileai.simulations.chat import ChatClient, ServedModel, endpoint_config, request_seed
from whileai.simulations.scenarios import Scenario

__all__ = ["DEFAULT_CUSTOMER_PROMPT", "Customer", "CustomerEpisode", "ModelCustomer", "customer_model"]

DEFAULT_CUSTOMER_PROMPT = (
    "You are role-playing a customer of an online shop who is chatting with the shop's support agent.\n"
    "Your first message to the agent was:\n{prompt}\n"
    "What you know and can tell the agent if asked: {facts}\n"
    "Answer the agent's last message as this customer, in one or two short sentences of plain text. Give what the "
    "agent asks for when you know it; never make up order details you were not given; never write as the agent."
)


@runtime_checkable
class CustomerEpisode(Protocol):
    """One rollout's customer."""

    def reply(self, transcript: Sequence[Event]) -> str:
        """The customer's answer to the agent's last message, given the whole transcript so far."""
        ...


@runtime_checkable
class Customer(Protocol):
    """Anything that can play the customer of a scenario."""

    def start(self, scenario: Scenario, *, seed: int | str) -> CustomerEpisode:
        """Open one rollout's customer; ``seed`` is the rollout's seed."""
        ...


class ModelCustomer(ServedModel):
    """A customer played by a served model; build it with :func:`customer_model`.

    Args:
        client: the endpoint's client, shared by every rollout.
        persona: the system prompt, a template with ``{prompt}`` (the first message) and ``{facts}`` (the
            scenario's ``customer_reply``).
        send_seed: send each request a ``seed`` derived from the rollout's seed and the turn.
    """

    def __init__(self, client: ChatClient, *, persona: str = DEFAULT_CUSTOMER_PROMPT, send_seed: bool = True) -> None:
        self.client = client
        self.persona = persona
        self.send_seed = send_seed

    builder = "customer_model"

    def start(self, scenario: Scenario, *, seed: int | str = 0) -> ModelCustomerEpisode:
        """Open one rollout's customer."""
        system = self.persona.format(prompt=scenario.prompt, facts=scenario.customer_reply)
        return ModelCustomerEpisode(self, system, seed)


class ModelCustomerEpisode:
    """One rollout's simulated customer."""

    def __init__(self, customer: ModelCustomer, system: str, seed: int | str) -> None:
        self._customer = customer
        self._system = system
        self._seed = seed
        self._turns = 0

    def messages(self, transcript: Sequence[Event]) -> list[dict[str, Any]]:
        """The conversation from the customer's side: the agent's messages as ``user``, the customer's later ones as
        ``assistant``; the first message is in the system prompt, tool traffic is not shown."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self._system}]
        for event in transcript[1:]:
            if event.role == "agent" and event.call is None:
                messages.append({"role": "user", "content": event.text})
            elif event.role == "customer":
                messages.append({"role": "assistant", "content": event.text})
        return messages

    def reply(self, transcript: Sequence[Event]) -> str:
        """Ask the model for the customer's answer to the agent's last message."""
        client = self._customer.client
        seed = request_seed(self._seed, "customer", self._turns) if self._customer.send_seed else None
        self._turns += 1
        answer = client.chat(self.messages(transcript), seed=seed)
        content = answer.message.get("content")
        return content.strip() if isinstance(content, str) else ""  # cleaned where it came in


def customer_model(
    base_url: str,
    model: str,
    *,
    temperature: float = DEFAULT_CUSTOMER_TEMPERATURE,
    persona: str = DEFAULT_CUSTOMER_PROMPT,
    send_seed: bool = True,
    **settings: Any,
) -> ModelCustomer:
    """A customer played by the model ``model`` served at ``base_url``, for ``simulate(..., simulator=True)``.

    Args:
        base_url: the server's base URL up to ``/v1`` (it may be the policy's own server).
        model: the served model's name.
        temperature: sampling temperature.
        persona: the system prompt template (``{prompt}``, ``{facts}``).
        send_seed: send each request a ``seed`` derived from the rollout's seed and the turn.
        settings: any other field of :class:`~whileai.http.endpoint.EndpointSettings` (``api_key_env``, ``timeout_s``,
            ``max_retries``, ``concurrency``, ...), with its default there; ``max_tokens`` is
            ``CUSTOMER_MAX_TOKENS`` unless given.

    Raises:
        BadInput: an unknown or out-of-range setting, ``api_key_env`` names a variable that is not set, or
            ``persona`` is not a template of ``{prompt}`` and ``{facts}``.

    Example (needs a server)::

        from whileai.simulations.rollouts import simulate

        customer = customer_model("http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B")
        rows = simulate("builtin:all", agent, n=8, simulator=True, customer=customer)
    """
    try:
        persona.format(prompt="", facts="")
    except (KeyError, IndexError, ValueError) as error:
        raise BadInput(f"customer_model: persona must be a template of {{prompt}} and {{facts}}: {error!r}") from None
    settings.setdefault("max_tokens", CUSTOMER_MAX_TOKENS)
    config = endpoint_config(base_url, model, what="customer_model", temperature=temperature, **settings)
    return ModelCustomer(ChatClient(config, role="customer"), persona=persona, send_seed=send_seed)
