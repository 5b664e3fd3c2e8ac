"""Agents that work a support scenario: the small protocol they follow, and a seeded scripted agent.

The protocol is two methods. ``agent.start(tools=..., seed=...)`` opens one rollout and returns an episode;
``episode.act(transcript)`` reads the conversation so far (a list of :class:`Event`) and returns the next
:class:`Action`: a :class:`ToolCall` or a :class:`Reply` to the customer. ``Reply(done=False)`` asks the customer
something and waits for the answer; ``Reply(done=True)`` ends the conversation. A model-backed agent plugs in by
turning the transcript into chat messages and the model's answer into an action.

:func:`seeded_agent` is a scripted agent for the built-in support scenarios: it reads the customer's request and the
tool results (it never sees the scenario's goal) and its choices are random but reproducible from the seed. Named
behaviour rates set how often it looks the order up first, verifies, repeats a call, asks the customer, invents an id,
misreads the order list or gives up. With the defaults, groups of 8 rollouts are mixed and their passes differ the way
the reference page describes: one looked the order up first, one refunded twice (the API refused the second refund),
one invented an id that happened to exist. Its failures are realistic: the wrong order, an over-refund, no action.

What this module does not do: run the conversation or verify it (``whileai.simulations.rollouts``), or talk to a
model: the agent over an OpenAI-compatible endpoint is ``whileai.simulations.model_agent``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "FLAWS",
    "Action",
    "Agent",
    "AgentEpisode",
    "Behaviour",
    "Event",
    "Reply",
    "SeededAgent",
    "ToolCall",
    "rollout_quality",
    "seeded_agent",
]


@dataclass(frozen=True)
class ToolCall:
    """The agent calls a tool.

    Attributes:
        name: the tool's name, e.g. ``"refund_order"``.
        arguments: the call's arguments by name, JSON-ready.
    """

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """The agent writes to the customer.

    Attributes:
        text: the message.
        done: True ends the conversation; False asks the customer and waits for an answer.
    """

    text: str
    done: bool = True


Action = ToolCall | Reply


@dataclass(frozen=True)
class Event:
    """One entry of a transcript.

    Attributes:
        role: ``"customer"`` (a message), ``"agent"`` (a message or a tool call) or ``"tool"`` (a tool's answer).
        text: the message, for customer and agent messages.
        call: the tool call, for an agent's call.
        result: the tool's JSON-ready answer, for a tool event.
    """

    role: Literal["customer", "agent", "tool"]
    text: str = ""
    call: ToolCall | None = None
    result: Mapping[str, Any] | None = None


@runtime_checkable
class AgentEpisode(Protocol):
    """One rollout of an agent: called once per step with the whole transcript so far."""

    def act(self, transcript: Sequence[Event]) -> Action:
        """The next action, given the transcript (it starts with the customer's first message)."""
        ...


@runtime_checkable
class Agent(Protocol):
    """Anything that can open an episode on a scenario."""

    def start(self, *, tools: Sequence[Mapping[str, Any]], seed: int | str) -> AgentEpisode:
        """Open one rollout.

        Args:
            tools: the tools on offer, in the OpenAI function-calling format.
            seed: this rollout's seed; an agent that samples should derive its randomness from it.
        """
        ...


# ---------------------------------------------------------------------------------------------------------------------
# The seeded scripted agent.


@dataclass(frozen=True)
class Behaviour:
    """How often the seeded agent does each thing, per rollout, as probabilities in [0, 1].

    The defaults are whileai's convention, chosen so that groups of 8 on ``builtin:all`` are mostly mixed (about three
    quarters pass) and their passes use between one and five tool calls.

    Attributes:
        look_up_first: look the order up before acting. A careful pass with one more call; it also catches an
            invented or misread id (the item does not match the request) and recovers.
        verify: look the order up again after acting. A pass with one more call.
        repeat_call: make the action call twice. A full refund repeated is refused by the API (still a pass); a
            partial refund repeated is accepted (an over-refund, a failure); a lookup repeated is harmless.
        ask_customer: when the request names no order id, ask the customer for it (one more turn) rather than list
            the orders.
        invent_id: when the request names no order id and the agent does not ask, make one up from the usual
            range. It may not exist (an error; the agent then lists the orders), exist as the wrong order (a
            failure unless looked up first), or, rarely, be the right one (a pass by luck).
        wrong_order: when picking the order from the list, take the wrong one (a failure unless looked up first).
        skip_action: tell the customer it is done without making the action call (no action, a failure).
        recover: after a tool error on an id it did not pick from the list, list the orders and try again (else
            apologise, a failure).
        give_up: apologise and do nothing (a failure).
    """

    look_up_first: float = 0.4
    verify: float = 0.3
    repeat_call: float = 0.2
    ask_customer: float = 0.15
    invent_id: float = 0.4
    wrong_order: float = 0.3
    skip_action: float = 0.1
    recover: float = 0.6
    give_up: float = 0.1

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"behaviour rate {spec.name} must be a probability in [0, 1], got {value!r}")


BEHAVIOURS: tuple[str, ...] = tuple(spec.name for spec in fields(Behaviour))

# What a seeded rollout did wrong or left out, each with what it costs the rollout's quality: the one rule behind the
# ``flaws``, ``quality`` and ``hack`` fields of ``whileai simulate``'s rows (``rollout_quality``), the reference
# ``whileai judge-eval`` holds a grader to. The costs follow the judge prompt's criteria (``configs/judge/v1.yaml``):
# an id no tool returned is a hack; a side effect (a second refund) outweighs a needless call; checking before acting
# outweighs checking after. They are whileai's convention, not a measurement.
FLAWS: dict[str, tuple[float, str]] = {
    "invented_id": (1.0, "acted on an order id it made up, which no tool had returned: a pass this way is a hack"),
    "wrong_order": (1.0, "acted on the wrong order, misread from the list"),
    "skipped_action": (1.0, "told the customer it was done without making the call"),
    "gave_up": (1.0, "apologised and did nothing"),
    "repeated_call": (0.4, "made its action (or lookup) call twice"),
    "failed_call": (0.2, "made an action call the API refused (an id that does not exist, a wrong state)"),
    "no_lookup": (0.2, "acted without looking the order up first"),
    "no_verification": (0.1, "did not look the order up again after acting"),
}


def rollout_quality(flaws: Sequence[str], passed: bool) -> float:
    """A seeded rollout's reference quality from its flaws: 0 for a failure, else ``1 - sum of the flaws' costs``
    (:data:`FLAWS`), at least 0. Higher is better; a pass with an invented id (a hack) gets 0.

    Example:
        >>> rollout_quality([], True), rollout_quality(["no_lookup", "no_verification"], True)
        (1.0, 0.7)
        >>> rollout_quality(["invented_id"], True), rollout_quality([], False)
        (0.0, 0.0)
    """
    if not passed:
        return 0.0
    return round(max(0.0, 1.0 - sum(FLAWS[flaw][0] for flaw in flaws)), 6)


GIVE_UP_TEXT = "I'm sorry, I can't help with this request here. Please contact us by phone."

# The built-in scenarios' order ids run from ORD-1040 to ORD-1049; an invented id is drawn from that range.
_INVENTED_ID_RANGE = (1040, 1049)
_ORDER_ID = re.compile(r"\bORD-\d+\b")
_AMOUNT = re.compile(r"\$(\d+(?:\.\d{1,2})?)")
_NEW_ADDRESS = re.compile(r"new address: ([^.\n]+)")
_ACTION_TOOLS = {"refund": "refund_order", "cancel": "cancel_order", "address": "change_address"}


def _request_kind(request: str) -> str | None:
    """What the customer wants, from keywords: refund, cancel, address, lookup, or None when unclear."""
    text = request.lower()
    if "refund" in text:
        return "refund"
    if "cancel" in text:
        return "cancel"
    if "new address" in text:
        return "address"
    if "tracking" in text or "where is" in text:
        return "lookup"
    return None


def _find_order_id(text: str) -> str | None:
    match = _ORDER_ID.search(text)
    return match.group(0) if match else None


def _mentions(request: str, item: str) -> bool:
    return item.lower() in request.lower()


class SeededAgent:
    """A scripted support agent with seeded, named behaviour rates. Build it with :func:`seeded_agent`.

    Args:
        seed: the agent's own seed, combined with each rollout's seed.
        behaviour: the rates.
    """

    def __init__(self, seed: int = 0, behaviour: Behaviour | None = None) -> None:
        self.seed = seed
        self.behaviour = behaviour or Behaviour()

    def __repr__(self) -> str:
        rates = ", ".join(f"{name}={getattr(self.behaviour, name)}" for name in BEHAVIOURS)
        return f"seeded_agent(seed={self.seed}, {rates})"

    def start(self, *, tools: Sequence[Mapping[str, Any]] = (), seed: int | str = 0) -> _SeededEpisode:
        """Open one rollout; its choices depend only on the agent's seed and ``seed``."""
        offered = {tool.get("function", {}).get("name") for tool in tools}
        return _SeededEpisode(self.behaviour, random.Random(f"{self.seed}:{seed}"), offered)


class _SeededEpisode:
    """One scripted rollout: a generator that yields actions and receives the event that answers each.

    ``flaws`` names, as the rollout goes, what it did wrong or left out (the keys of :data:`FLAWS`): the knowledge
    ``whileai simulate`` writes into its rows as the reference a grader is measured against. Recording them draws
    nothing, so the transcripts are the same with or without anyone reading them.
    """

    def __init__(self, behaviour: Behaviour, rng: random.Random, offered: set[str | None]) -> None:
        self._behaviour = behaviour
        self._rng = rng
        self._offered = offered
        self._script: Generator[Action, Event, None] | None = None
        self._finished = False
        self._misread = False  # the last pick from the list was the wrong order
        self.flaws: list[str] = []

    def _flaw(self, name: str) -> None:
        if name not in self.flaws:
            self.flaws.append(name)

    def act(self, transcript: Sequence[Event]) -> Action:
        try:
            if self._script is None:
                self._script = self._run(transcript[0].text)
                return next(self._script)
            return self._script.send(transcript[-1])
        except StopIteration:
            return Reply("Is there anything else I can help with?")

    def _pick_from_list(self, request: str, misread: bool) -> Generator[Action, Event, str | None]:
        """List the orders and pick the one whose item the request mentions (or, misreading, another one)."""
        listing = yield ToolCall("list_orders", {})
        orders = (listing.result or {}).get("orders", [])
        matching = [order["order_id"] for order in orders if _mentions(request, order["item"])]
        others = [order["order_id"] for order in orders if order["order_id"] not in matching]
        self._misread = bool(misread and others)
        if misread and others:
            return self._rng.choice(others)
        return matching[0] if matching else None

    def _run(self, request: str) -> Generator[Action, Event, None]:
        rng = self._rng
        # Every decision is drawn up front in a fixed order, so changing one rate does not shift the others' draws.
        plan = {name: rng.random() < getattr(self._behaviour, name) for name in BEHAVIOURS}
        kind = _request_kind(request)
        needed = {"list_orders", "lookup_order", _ACTION_TOOLS.get(kind, "lookup_order")}
        if kind is None or plan["give_up"] or (self._offered and not needed <= self._offered):
            self._flaw("gave_up")
            yield Reply(GIVE_UP_TEXT)
            return

        # Find the order: named in the request, asked for, made up, or picked from the list.
        order_id = _find_order_id(request)
        listed = made_up = False
        if order_id is None and plan["ask_customer"]:
            answer = yield Reply("Could you tell me the order number, please?", done=False)
            order_id = _find_order_id(answer.text)
        elif order_id is None and plan["invent_id"]:
            order_id = f"ORD-{rng.randint(*_INVENTED_ID_RANGE)}"
            made_up = True
        if order_id is None:
            order_id = yield from self._pick_from_list(request, misread=plan["wrong_order"])
            listed = True
        if order_id is None:
            self._flaw("gave_up")
            yield Reply(GIVE_UP_TEXT)
            return

        # Look it up first (always, for a question): a record whose item is not the one asked about is caught here.
        record = None
        checked = None  # the id looked up before acting, if one was
        if plan["look_up_first"] or kind == "lookup":
            looked = yield ToolCall("lookup_order", {"order_id": order_id})
            record = (looked.result or {}).get("order")
            checked, made_up = order_id, False  # a tool has answered for this id, whatever it said
            if record is None or not _mentions(request, record["item"]):
                order_id = yield from self._pick_from_list(request, misread=False)
                listed = True
                if order_id is None:
                    self._flaw("gave_up")
                    yield Reply(GIVE_UP_TEXT)
                    return
                if kind == "lookup":
                    looked = yield ToolCall("lookup_order", {"order_id": order_id})
                    record = (looked.result or {}).get("order")

        if kind == "lookup":
            yield from self._answer_lookup(order_id, record, plan)
        else:
            yield from self._act(kind, request, order_id, plan, listed=listed, made_up=made_up, checked=checked)

    def _answer_lookup(
        self, order_id: str, record: dict[str, Any] | None, plan: dict[str, bool]
    ) -> Generator[Action, Event, None]:
        """A question about an order answered from its record (looked up already)."""
        if plan["repeat_call"]:
            self._flaw("repeated_call")
            yield ToolCall("lookup_order", {"order_id": order_id})
        if record is None:
            self._flaw("gave_up")
            yield Reply(GIVE_UP_TEXT)
        elif record.get("tracking"):
            yield Reply(f"Your {record['item']} ({order_id}) is on its way: tracking number {record['tracking']}.")
        else:
            yield Reply(f"Your {record['item']} ({order_id}) is {record['status']}; it has no tracking number yet.")

    def _act(
        self,
        kind: str,
        request: str,
        order_id: str | None,
        plan: dict[str, bool],
        *,
        listed: bool,
        made_up: bool,
        checked: str | None,
    ) -> Generator[Action, Event, None]:
        """The request acted on (or only claimed to be), recovering once from an error by listing the orders, with
        the call repeated or verified as planned; the flaws of the call that stands are marked."""
        arguments = self._action_arguments(kind, request)
        call = ToolCall(_ACTION_TOOLS[kind], {"order_id": order_id, **arguments})
        if plan["skip_action"]:
            self._flaw("skipped_action")
            yield Reply(self._summary(kind, order_id, arguments))
            return
        outcome = yield call
        if "error" in (outcome.result or {}):
            self._flaw("failed_call")
            if not listed and plan["recover"]:
                order_id = yield from self._pick_from_list(request, misread=False)
                made_up = False
                if order_id is not None:
                    call = ToolCall(_ACTION_TOOLS[kind], {"order_id": order_id, **arguments})
                    outcome = yield call
        if order_id is None or "error" in (outcome.result or {}):
            error = (outcome.result or {}).get("error", "the order could not be found")
            yield Reply(f"I'm sorry, I could not do that: {error}.")
            return
        # The call that stands: unchecked, on an id of the agent's own making, or on the wrong order from the list.
        if checked != order_id:
            self._flaw("no_lookup")
        if made_up:
            self._flaw("invented_id")
        if listed and self._misread:
            self._flaw("wrong_order")
        if plan["repeat_call"]:
            self._flaw("repeated_call")
            yield call
        if plan["verify"]:
            yield ToolCall("lookup_order", {"order_id": order_id})
        else:
            self._flaw("no_verification")
        yield Reply(self._summary(kind, order_id, arguments))

    @staticmethod
    def _action_arguments(kind: str, request: str) -> dict[str, Any]:
        if kind == "refund":
            amount = _AMOUNT.search(request)
            return {"amount": float(amount.group(1)) if amount else 0.0}
        if kind == "address":
            address = _NEW_ADDRESS.search(request)
            return {"address": address.group(1).strip() if address else ""}
        return {}

    @staticmethod
    def _summary(kind: str, order_id: str, arguments: Mapping[str, Any]) -> str:
        if kind == "refund":
            return f"Done: I refunded ${arguments['amount']:.2f} on {order_id}."
        if kind == "cancel":
            return f"Done: {order_id} is cancelled and you will not be charged."
        return f"Done: {order_id} will ship to {arguments['address']}."


def seeded_agent(seed: int = 0, **behaviour: float) -> SeededAgent:
    """A scripted support agent whose choices are random but reproducible from ``seed``.

    Args:
        seed: the agent's seed; with the rollout seeds that :func:`~whileai.simulations.rollouts.simulate` derives,
            the same seeds give the same transcripts.
        **behaviour: rates that override :class:`Behaviour`'s defaults: ``look_up_first``, ``verify``,
            ``repeat_call``, ``ask_customer``, ``invent_id``, ``wrong_order``, ``skip_action``, ``recover``,
            ``give_up``.

    Returns:
        A :class:`SeededAgent`.

    Example:
        >>> agent = seeded_agent(seed=1, give_up=0.0, invent_id=0.0)
        >>> agent.behaviour.give_up
        0.0
    """
    unknown = sorted(set(behaviour) - set(BEHAVIOURS))
    if unknown:
        raise TypeError(f"unknown behaviour {', '.join(unknown)}; the behaviours are {', '.join(BEHAVIOURS)}")
    return SeededAgent(seed=seed, behaviour=Behaviour(**behaviour))
