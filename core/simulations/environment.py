"""The support scenarios as a TRL environment, for ``GRPOTrainer(environment_factory=...)``.

TRL 1.16's contract (``trl/trainer/grpo_trainer.py``, ``environment_factory``): the factory is called with no
arguments and returns an instance; before each rollout TRL calls ``reset(**example)`` with the dataset row and appends
the string it returns to the last user message; every public method other than ``reset`` and ``get_reward`` is a tool,
described to the model by its type hints and Google-style docstring. One instance serves one rollout at a time.

Two classes, because of what ``get_reward`` does in TRL: a class that defines it owns a reward, and TRL adds
``get_reward`` as one more reward function of weight 1 beside the trainer's ``reward_funcs``. With whileai's grader
the reward function already holds the verifier's verdict (``whileai.tasks.load.support_verifier`` reads
:attr:`SupportEnvironment.verdict`), so an environment that also owned one would be counted twice: TRL's advantage
would be ``A + A'`` instead of equation 3's ``A'``, and a zeroed hack would still get its +1. So:

- :class:`SupportEnvironment`: ``reset``, the desk's five tools and the ``verdict`` property, no reward of its own.
  ``whileai train`` uses it.
- :class:`RewardedSupportEnvironment`: the same, plus ``get_reward`` (the verdict as 1.0 or 0.0), for a plain TRL run
  where the environment is the only reward source.

``reset`` opens the scenario named by the row's ``scenario_id`` (or, with no dataset, the next one in order) on a fresh
order desk; the tools are the desk's, each answering a JSON string (``whileai.rows.text.dump_json``, as
``whileai simulate`` records tool answers), errors included.

Only scenarios verified on the orders alone fit: TRL does not hand ``get_reward`` the model's last message, so
``builtin:lookups`` (checked on the reply) is refused. The default is ``builtin:actions``.

What this module does not do: import trl, datasets or torch (it needs none of them), or build the trainer. Use it as::

    from functools import partial
    from datasets import Dataset
    from whileai.simulations.environment import RewardedSupportEnvironment, environment_rows

    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=Dataset.from_list(environment_rows(...)),
                          environment_factory=partial(RewardedSupportEnvironment, "builtin:actions"))
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from whileai.integrations.tool_calls import environment_tools
from whileai.rows.text import dump_json
from whileai.simulations.agents import Agent, Event, Reply, ToolCall
from whileai.simulations.scenarios import SUPPORT_SYSTEM_PROMPT, Scenario, Verdict, load_scenarios
from whileai.simulations.support_tools import SUPPORT_TOOLS, OrderDesk

__all__ = [
    "RewardedSupportEnvironment",
    "SupportEnvironment",
    "environment_conversation",
    "environment_rows",
    "environment_tools",
]


def _scenario_list(scenarios: Sequence[Scenario] | str, seed: int) -> list[Scenario]:
    scenarios = load_scenarios(scenarios, seed=seed) if isinstance(scenarios, str) else list(scenarios)
    if not scenarios:
        raise ValueError("the environment needs at least one scenario")
    reply_checked = [scenario.scenario_id for scenario in scenarios if scenario.checks_reply]
    if reply_checked:
        raise ValueError(
            f"{len(reply_checked)} scenario(s) (e.g. {reply_checked[0]!r}) are verified on the agent's last reply, "
            "which TRL does not pass to get_reward; use scenarios verified on the orders alone, e.g. 'builtin:actions'"
        )
    return scenarios


def environment_rows(
    scenarios: Sequence[Scenario] | str = "builtin:actions",
    seed: int = 0,
    system_prompt: str = SUPPORT_SYSTEM_PROMPT,
) -> list[dict[str, Any]]:
    """Dataset rows for the environment: a conversational prompt and the ``scenario_id`` ``reset`` reads.

    The user message is empty: ``reset`` returns the customer's request and TRL appends it there.

    Args:
        scenarios: the scenarios, or a family name (generated with ``seed``).
        seed: the generation seed for a family name; give the environment the same one.
        system_prompt: the instruction before the customer's message.

    Returns:
        One ``{"prompt": [...], "scenario_id": ...}`` per scenario, for ``datasets.Dataset.from_list``.
    """
    return [
        {
            "prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": ""}],
            "scenario_id": scenario.scenario_id,
        }
        for scenario in _scenario_list(scenarios, seed)
    ]


class SupportEnvironment:
    """One rollout's support desk for TRL: ``reset`` and five tools; the end state's ``verdict`` is a property, not a
    reward TRL would add (see the module docstring).

    Args:
        scenarios: the scenarios, or a family name (default ``"builtin:actions"``).
        seed: the generation seed for a family name.

    Example:
        >>> env = SupportEnvironment("builtin:refunds")
        >>> env.reset(scenario_id="refund-0").startswith("Hi")
        True
        >>> env.refund_order("ORD-1", 5.0)
        '{"error": "no order with id ORD-1"}'
        >>> env.verdict.passed
        False
    """

    def __init__(self, scenarios: Sequence[Scenario] | str = "builtin:actions", seed: int = 0) -> None:
        self._scenarios = _scenario_list(scenarios, seed)
        self._by_id = {scenario.scenario_id: scenario for scenario in self._scenarios}
        self._resets = 0
        self._scenario: Scenario | None = None
        self._desk: OrderDesk | None = None

    # Properties, not methods: TRL would offer every public method to the model as a tool.
    @property
    def scenario(self) -> Scenario | None:
        """The scenario of the current rollout (None before the first ``reset``)."""
        return self._scenario

    @property
    def verdict(self) -> Verdict:
        """The verifier's verdict on the current end state, with its reasons."""
        if self._scenario is None or self._desk is None:
            return Verdict(False, ("reset was never called",))
        return self._scenario.verify(self._desk.orders)

    def reset(self, **kwargs: Any) -> str:
        """Start a rollout on the row's ``scenario_id`` (or the next scenario) and return the customer's request."""
        scenario_id = kwargs.get("scenario_id")
        if scenario_id is None:
            # No dataset: TRL resets every pooled instance once per batch, so they all move to the same next
            # scenario and a generation group shares its task.
            scenario = self._scenarios[self._resets % len(self._scenarios)]
        elif scenario_id in self._by_id:
            scenario = self._by_id[scenario_id]
        else:
            raise ValueError(
                f"unknown scenario_id {scenario_id!r}; build the environment with the scenarios the dataset was "
                "made from (same family and seed)"
            )
        self._resets += 1
        self._scenario = scenario
        self._desk = scenario.desk()
        return scenario.prompt

    def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        if self._desk is None:
            return dump_json({"error": "no conversation is open"})
        return dump_json(self._desk.call(name, arguments))

    # The tools. TRL reads their signatures and docstrings to describe them to the model.

    def list_orders(self) -> str:
        """List the customer's orders: id, item, status and date of each.

        Returns:
            The orders as JSON.
        """
        return self._call("list_orders", {})

    def lookup_order(self, order_id: str) -> str:
        """Show one order in full: amount, status, address, tracking number and amount refunded.

        Args:
            order_id: The order id, e.g. ORD-1042.

        Returns:
            The order as JSON, or an error.
        """
        return self._call("lookup_order", {"order_id": order_id})

    def refund_order(self, order_id: str, amount: float) -> str:
        """Refund part or all of a delivered order. Refunds add up and cannot exceed what was paid.

        Args:
            order_id: The order id, e.g. ORD-1042.
            amount: Dollars to refund, at most two decimals.

        Returns:
            The refund as JSON, or an error.
        """
        return self._call("refund_order", {"order_id": order_id, "amount": amount})

    def cancel_order(self, order_id: str) -> str:
        """Cancel an order that has not shipped yet; the customer is not charged.

        Args:
            order_id: The order id, e.g. ORD-1042.

        Returns:
            The cancellation as JSON, or an error.
        """
        return self._call("cancel_order", {"order_id": order_id})

    def change_address(self, order_id: str, address: str) -> str:
        """Change the shipping address of an order that has not shipped yet.

        Args:
            order_id: The order id, e.g. ORD-1042.
            address: The full new shipping address.

        Returns:
            The new address as JSON, or an error.
        """
        return self._call("change_address", {"order_id": order_id, "address": address})


class RewardedSupportEnvironment(SupportEnvironment):
    """:class:`SupportEnvironment` that owns its reward: TRL adds ``get_reward`` as a reward function of weight 1.

    For a plain TRL run with no other reward source. Never beside whileai's grader, which already holds the verdict
    (``whileai train`` refuses a trainer whose reward functions are more than the grader's one).

    Example:
        >>> env = RewardedSupportEnvironment("builtin:refunds")
        >>> env.reset(scenario_id="refund-0").startswith("Hi")
        True
        >>> env.get_reward()
        0.0
    """

    def get_reward(self) -> float:
        """1.0 when the scenario's verifier passes the end state, else 0.0."""
        return 1.0 if self.verdict.passed else 0.0


def environment_conversation(
    scenario: Scenario,
    agent: Agent,
    *,
    seed: int | str = 0,
    max_calls: int = 16,
    system_prompt: str = SUPPORT_SYSTEM_PROMPT,
) -> tuple[list[dict[str, Any]], Verdict]:
    """An agent's rollout on the environment, as the chat messages TRL's tool loop builds from a model's turns.

    TRL 1.16 (``grpo_trainer.py``, ``_tool_call_loop``) appends, after each assistant message with tool calls, one
    ``{"role": "tool", "name": ..., "content": str(answer)}`` per call; a message without tool calls ends the rollout
    (no customer answers in training, so an agent's question ends it too).

    Args:
        scenario: the task.
        agent: an :class:`~whileai.simulations.agents.Agent`, e.g. ``seeded_agent(seed=0)``.
        seed: the rollout's seed, handed to ``agent.start``.
        max_calls: the most tool calls answered before the rollout is cut off (TRL's
            ``max_tool_calling_iterations``).
        system_prompt: the system message of the prompt.

    Returns:
        ``(messages, verdict)``: the whole conversation (system, the customer's request, then the completion) and the
        verifier's verdict on the end state. ``messages[2:]`` is the completion TRL hands a reward function.

    Example:
        >>> from whileai.simulations.agents import seeded_agent
        >>> scenario = load_scenarios("builtin:actions", n=1)[0]
        >>> messages, verdict = environment_conversation(scenario, seeded_agent(seed=0), seed="0:0")
        >>> [m["role"] for m in messages[:3]]
        ['system', 'user', 'assistant']
    """
    environment = SupportEnvironment([scenario])
    request = environment.reset(scenario_id=scenario.scenario_id)
    episode = agent.start(tools=SUPPORT_TOOLS, seed=seed)
    events = [Event("customer", text=request)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": request},
    ]
    calls = 0
    while True:
        action = episode.act(events)
        if isinstance(action, Reply):
            messages.append({"role": "assistant", "content": action.text})
            break
        if not isinstance(action, ToolCall):
            raise TypeError(f"an agent's act() must return a ToolCall or a Reply, got {type(action).__name__}")
        call = {"type": "function", "function": {"name": action.name, "arguments": dict(action.arguments)}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if calls == max_calls:  # TRL runs at most max_tool_calling_iterations rounds of tool calls
            break
        answer = getattr(environment, action.name)(**action.arguments)
        messages.append({"role": "tool", "name": action.name, "content": answer})
        events += [Event("agent", call=action), Event("tool", result=json.loads(answer))]
        calls += 1
    return messages, environment.verdict
