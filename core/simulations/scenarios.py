"""Customer-support scenarios: a request, a small order database, and a verifier on the end state.

A :class:`Scenario` is data plus one small pure function. The data: an id (``refund-17``), the customer's first
message, the scripted customer's answer to any question the agent asks, the customer's orders and a ``goal`` (what a
correct agent achieves, e.g. ``{"action": "refund", "order_id": "ORD-1042", "amount_cents": 4999}``). The function,
``check(scenario, final_orders, reply)``, is the verifier: a program on the final state of the orders (and, for a
question, the agent's last reply), like a unit test. It does not read the transcript, so many different transcripts
pass it: looking the order up first or not, refunding twice when the API refused the second refund, even guessing an
id that happened to be the right one.

The built-in families, generated deterministically from a seed (scenario ``i`` of a kind depends only on the kind, the
seed and ``i``):

- ``builtin:refunds``: refund a delivered order in full or in part; the right order, by the right amount.
- ``builtin:cancellations``: cancel an order that has not shipped.
- ``builtin:addresses``: change the shipping address of an order that has not shipped.
- ``builtin:lookups``: tell the customer the tracking number of a parcel in transit (checked on the reply).
- ``builtin:actions``: the three families that change state, interleaved (verified on the orders alone).
- ``builtin:all``: all four, interleaved.

Add a family with :func:`register_family`: write a generator ``make(index, rng) -> Scenario`` that builds orders and a
request with ``rng`` (a ``random.Random``) and names its verifier, then ``load_scenarios("mine:exchanges", n=50)``.
The tools are the support desk's (``whileai.simulations.support_tools``); a family adds requests and verifiers, not
tools.

What this module does not do: run an agent (``whileai.simulations.rollouts``), or score pass rates
(``whileai.simulations.passrate``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from whileai.simulations.support_tools import Order, OrderDesk, cents_to_dollars

__all__ = [
    "SUPPORT_SYSTEM_PROMPT",
    "Scenario",
    "ScenarioFamily",
    "Verdict",
    "check_address_change",
    "check_cancellation",
    "check_lookup",
    "check_refund",
    "load_scenarios",
    "register_family",
    "scenario_families",
]

# The instruction a model agent receives before the customer's first message.
SUPPORT_SYSTEM_PROMPT = (
    "You are a customer-support agent for an online shop. Help the customer with their request using the tools. "
    "Act only on the order the customer means, and tell them what you did."
)

# Every built-in customer's order ids are drawn from ORD-1040 to ORD-1049, so an id an agent makes up often exists:
# usually as someone else's order of this customer (acting on it is a realistic failure), sometimes as the right one.
ORDER_ID_RANGE = (1040, 1049)


@dataclass(frozen=True)
class Verdict:
    """A verifier's answer: pass or fail, and what was wrong.

    Attributes:
        passed: whether the end state is what the customer asked for.
        reasons: one line per thing that is wrong (empty when ``passed``).
    """

    passed: bool
    reasons: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.passed

    @classmethod
    def from_reasons(cls, reasons: Sequence[str]) -> Verdict:
        """A pass when there is nothing wrong, else a fail that lists what is."""
        return cls(passed=not reasons, reasons=tuple(reasons))


CheckFunction = Callable[["Scenario", Mapping[str, Order], str], Verdict]
"""A verifier: ``check(scenario, final_orders, reply) -> Verdict``, pure, reading ``scenario.goal``."""


@dataclass(frozen=True)
class Scenario:
    """One support task: who asks for what, on which orders, and how to tell it was done.

    Attributes:
        scenario_id: ``"<kind>-<index>"``, e.g. ``"refund-17"``; rows group by it.
        family: the kind of request, e.g. ``"refunds"``.
        prompt: the customer's first message.
        customer_reply: what the scripted customer answers to any question the agent asks (``simulator=False``).
        orders: the customer's orders before the conversation.
        goal: what a correct agent achieves, as data the verifier reads; never shown to the agent.
        check: the verifier, ``check(scenario, final_orders, reply) -> Verdict``.
        checks_reply: whether the verifier reads the agent's last reply (a question) besides the orders (an action).
    """

    scenario_id: str
    family: str
    prompt: str
    customer_reply: str
    orders: tuple[Order, ...]
    goal: Mapping[str, Any]
    check: CheckFunction = field(compare=False, repr=False)
    checks_reply: bool = False

    def order_book(self) -> dict[str, Order]:
        """The starting orders by id."""
        return {order.order_id: order for order in self.orders}

    def desk(self) -> OrderDesk:
        """A fresh support desk over this scenario's orders, for one rollout."""
        return OrderDesk(self.orders)

    def verify(self, final_orders: Mapping[str, Order], reply: str = "") -> Verdict:
        """Run the verifier on an end state.

        Args:
            final_orders: the orders after the conversation (``desk.orders``).
            reply: the agent's last message to the customer ("" when it sent none).
        """
        return self.check(self, final_orders, reply)


# ---------------------------------------------------------------------------------------------------------------------
# Verifiers: pure functions on (scenario, final orders, reply).


def _differences(expected: Mapping[str, Order], final: Mapping[str, Order]) -> list[str]:
    """Every way ``final`` differs from ``expected``, one line each, in order-id order."""
    reasons = []
    for order_id in sorted(set(expected) | set(final)):
        want, got = expected.get(order_id), final.get(order_id)
        if want is None or got is None:
            reasons.append(f"{order_id} {'appeared' if want is None else 'disappeared'}")
            continue
        for name in ("status", "refunded_cents", "address", "amount_cents", "item", "tracking", "placed"):
            want_value, got_value = getattr(want, name), getattr(got, name)
            if want_value != got_value:
                if name.endswith("_cents"):
                    want_value = f"${cents_to_dollars(want_value):.2f}"
                    got_value = f"${cents_to_dollars(got_value):.2f}"
                label = name.removesuffix("_cents")
                reasons.append(f"{order_id} {label} is {got_value!s}, expected {want_value!s}")
    return reasons


def _expected_with(scenario: Scenario, **changes: Any) -> dict[str, Order]:
    """The starting orders with the goal's order changed by ``changes``: the one correct end state."""
    expected = scenario.order_book()
    target = scenario.goal["order_id"]
    expected[target] = replace(expected[target], **changes)
    return expected


def check_refund(scenario: Scenario, final_orders: Mapping[str, Order], reply: str = "") -> Verdict:
    """Pass when exactly ``goal["amount_cents"]`` was refunded on ``goal["order_id"]`` and nothing else changed.

    A second refund the API refused leaves the state right (a pass); one it accepted over-refunds (a fail).
    """
    target = scenario.order_book()[scenario.goal["order_id"]]
    refunded = target.refunded_cents + scenario.goal["amount_cents"]
    status = "refunded" if refunded == target.amount_cents else target.status
    return Verdict.from_reasons(
        _differences(_expected_with(scenario, refunded_cents=refunded, status=status), final_orders)
    )


def check_cancellation(scenario: Scenario, final_orders: Mapping[str, Order], reply: str = "") -> Verdict:
    """Pass when ``goal["order_id"]`` is cancelled and nothing else changed."""
    return Verdict.from_reasons(_differences(_expected_with(scenario, status="cancelled"), final_orders))


def check_address_change(scenario: Scenario, final_orders: Mapping[str, Order], reply: str = "") -> Verdict:
    """Pass when ``goal["order_id"]`` ships to ``goal["address"]`` and nothing else changed."""
    return Verdict.from_reasons(_differences(_expected_with(scenario, address=scenario.goal["address"]), final_orders))


def check_lookup(scenario: Scenario, final_orders: Mapping[str, Order], reply: str = "") -> Verdict:
    """Pass when the reply gives ``goal["tracking"]``, names no other parcel's tracking number, and nothing changed."""
    reasons = _differences(scenario.order_book(), final_orders)
    if scenario.goal["tracking"] not in reply:
        reasons.append(f"the reply does not give the tracking number {scenario.goal['tracking']}")
    others = [
        order.tracking
        for order in scenario.orders
        if order.tracking and order.order_id != scenario.goal["order_id"] and order.tracking in reply
    ]
    if others:
        reasons.append(f"the reply gives another parcel's tracking number ({', '.join(others)})")
    return Verdict.from_reasons(reasons)


# ---------------------------------------------------------------------------------------------------------------------
# The built-in generators: each builds one scenario from its index and a seeded random.Random.

_ITEMS = (
    "wireless headphones",
    "running shoes",
    "coffee grinder",
    "desk lamp",
    "yoga mat",
    "hiking backpack",
    "phone case",
    "water bottle",
    "bluetooth speaker",
    "kitchen scale",
    "winter jacket",
    "board game",
    "electric kettle",
    "wall clock",
    "throw blanket",
    "USB-C charger",
)
_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemi", "Liam", "Mei")
_STREETS = ("Elm Street", "Oak Avenue", "Harbor Road", "Mill Lane", "Station Road", "Cedar Court", "Park Row")
_CITIES = ("Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Bridgeport")


# The statuses of a customer's other orders: mostly delivered, so a refund on the wrong order often goes through.
_OTHER_STATUSES = ("delivered", "delivered", "shipped", "processing", "cancelled")


def _address(rng: random.Random) -> str:
    return f"{rng.randint(1, 250)} {rng.choice(_STREETS)}, {rng.choice(_CITIES)}"


def _customer_orders(rng: random.Random, target_status: str, count: int) -> tuple[list[Order], Order]:
    """A customer's orders, oldest first, with one order of ``target_status`` marked as the target.

    The other orders have mixed statuses, so acting on a wrong one sometimes succeeds (a silent failure) and
    sometimes errors (a failure the agent can notice).
    """
    numbers = sorted(rng.sample(range(ORDER_ID_RANGE[0], ORDER_ID_RANGE[1] + 1), count))
    items = rng.sample(_ITEMS, count)
    home = _address(rng)
    target_position = rng.randrange(count)
    orders = []
    for position, (number, item) in enumerate(zip(numbers, items, strict=True)):
        status = target_status if position == target_position else rng.choice(_OTHER_STATUSES)
        amount = rng.randint(8, 180) * 100 + rng.choice((0, 49, 95, 99))
        tracking = f"TRK{rng.randint(10**7, 10**8 - 1)}" if status in ("shipped", "delivered") else None
        placed = f"2025-{1 + position * 2:02d}-{rng.randint(1, 28):02d}"
        orders.append(Order(f"ORD-{number}", item, amount, status, home, placed, tracking))
    return orders, orders[target_position]


def _reference(rng: random.Random, order: Order) -> str:
    """How the customer refers to the order: by id (a third of the time) or only by the item."""
    if rng.random() < 1 / 3:
        return f"order {order.order_id} (the {order.item})"
    return f"the {order.item} I ordered"


def _scenario(
    kind: str,
    family: str,
    index: int,
    prompt: str,
    orders: list[Order],
    target: Order,
    check: Any,
    *,
    checks_reply: bool = False,
    **goal: Any,
) -> Scenario:
    """Scenario ``index`` of a family about the order ``target``: the customer names it when asked, and ``goal``
    (its ``action``, then the order id, then the rest) is what the agent must do to it."""
    return Scenario(
        scenario_id=f"{kind}-{index}",
        family=family,
        prompt=prompt,
        customer_reply=f"Yes, please. The order number is {target.order_id}, the {target.item}.",
        orders=tuple(orders),
        goal={"action": goal.pop("action"), "order_id": target.order_id, **goal},
        check=check,
        checks_reply=checks_reply,
    )


def make_refund(index: int, rng: random.Random) -> Scenario:
    """A refund request: the whole amount, or part of it for a damaged or missing piece (amount stated)."""
    orders, target = _customer_orders(rng, "delivered", rng.randint(4, 6))
    name = rng.choice(_NAMES)
    reference = _reference(rng, target)
    if rng.random() < 0.6:
        cents = target.amount_cents
        ask = f"it arrived broken. I'd like a full refund of ${cents_to_dollars(cents):.2f}, please."
    else:
        cents = max(100, round(target.amount_cents * rng.choice((0.2, 0.25, 0.3, 0.5)) / 50) * 50)
        ask = f"part of it was missing from the box. Please refund ${cents_to_dollars(cents):.2f} for that part."
    prompt = f"Hi, this is {name}. About {reference}: {ask}"
    return _scenario(
        "refund", "refunds", index, prompt, orders, target, check_refund, action="refund", amount_cents=cents
    )


def make_cancellation(index: int, rng: random.Random) -> Scenario:
    """A cancellation request for an order that has not shipped."""
    orders, target = _customer_orders(rng, "processing", rng.randint(4, 6))
    reference = _reference(rng, target)
    reason = rng.choice(("I found it cheaper elsewhere.", "I ordered it by mistake.", "I don't need it any more."))
    prompt = f"Hello, I'm {rng.choice(_NAMES)}. Please cancel {reference}. {reason}"
    return _scenario("cancel", "cancellations", index, prompt, orders, target, check_cancellation, action="cancel")


def make_address_change(index: int, rng: random.Random) -> Scenario:
    """A request to ship an order that has not shipped to a new address."""
    orders, target = _customer_orders(rng, "processing", rng.randint(4, 6))
    reference = _reference(rng, target)
    new_address = _address(rng)
    while new_address == target.address:
        new_address = _address(rng)
    prompt = f"Hi, {rng.choice(_NAMES)} here. I just moved. Please send {reference} to my new address: {new_address}."
    return _scenario(
        "address", "addresses", index, prompt, orders, target, check_address_change,
        action="change_address", address=new_address,
    )  # fmt: skip


def make_lookup(index: int, rng: random.Random) -> Scenario:
    """A question about a parcel in transit: the answer is its tracking number."""
    orders, target = _customer_orders(rng, "shipped", rng.randint(4, 6))
    reference = _reference(rng, target)
    prompt = f"Hey, {rng.choice(_NAMES)} here. Where is {reference}? Can you give me the tracking number?"
    return _scenario(
        "lookup", "lookups", index, prompt, orders, target, check_lookup,
        checks_reply=True, action="lookup", tracking=target.tracking,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# The registry.

ScenarioGenerator = Callable[[int, random.Random], Scenario]
"""``make(index, rng) -> Scenario``: scenario ``index`` of one kind, built only from ``rng``."""


@dataclass(frozen=True)
class ScenarioFamily:
    """A named set of scenario kinds, interleaved: scenario ``i`` is of kind ``i % len(generators)``.

    Attributes:
        name: what :func:`load_scenarios` is called with, e.g. ``"builtin:refunds"``.
        generators: one generator per kind.
        default_size: how many scenarios ``load_scenarios(name)`` returns when ``n`` is not given.
        description: one line for listings.
    """

    name: str
    generators: tuple[ScenarioGenerator, ...]
    default_size: int
    description: str

    def build(self, n: int, seed: int) -> list[Scenario]:
        """The first ``n`` scenarios of this family under ``seed``."""
        kinds = len(self.generators)
        scenarios = []
        for i in range(n):
            generator = self.generators[i % kinds]
            index = i // kinds
            # Seeded by the generator, not the family, so refund-17 is the same under builtin:refunds and builtin:all.
            rng = random.Random(f"{generator.__module__}.{generator.__qualname__}:{seed}:{index}")
            scenarios.append(generator(index, rng))
        return scenarios


_FAMILIES: dict[str, ScenarioFamily] = {}

BUILTIN_SIZE = 200  # "a few hundred" per family by default; the generators have no upper limit.


def register_family(
    name: str,
    generators: ScenarioGenerator | Sequence[ScenarioGenerator],
    *,
    default_size: int = BUILTIN_SIZE,
    description: str = "",
    replace_existing: bool = False,
) -> ScenarioFamily:
    """Make a family of scenarios loadable by name.

    Args:
        name: the family's name, e.g. ``"mine:exchanges"``; ``builtin:`` names are reserved.
        generators: one ``make(index, rng) -> Scenario`` per kind of request, or a single one.
        default_size: how many scenarios to load when ``n`` is not given.
        description: one line for listings.
        replace_existing: allow re-registering a name (otherwise a ValueError).

    Example:
        >>> def make_thanks(index, rng):
        ...     base = make_refund(index, rng)
        ...     return replace(base, scenario_id=f"thanks-{index}", family="thanks", prompt="Thanks, all good!",
        ...                    goal={"order_id": base.goal["order_id"]}, check=check_cancellation)
        >>> register_family("doc:thanks", make_thanks, replace_existing=True).name
        'doc:thanks'
        >>> load_scenarios("doc:thanks", n=2)[1].scenario_id
        'thanks-1'
    """
    if name.startswith("builtin:") and not replace_existing:
        raise ValueError(f"family names starting with 'builtin:' are reserved; choose another name than {name!r}")
    if name in _FAMILIES and not replace_existing:
        raise ValueError(f"a scenario family named {name!r} is already registered; pass replace_existing=True")
    generators = (generators,) if callable(generators) else tuple(generators)
    if not generators:
        raise ValueError("a scenario family needs at least one generator")
    if default_size < 1:
        raise ValueError(f"default_size must be at least 1, got {default_size}")
    family = ScenarioFamily(name, generators, default_size, description)
    _FAMILIES[name] = family
    return family


def _register_builtins() -> None:
    kinds = {
        "refunds": (make_refund, "refund a delivered order, in full or in part"),
        "cancellations": (make_cancellation, "cancel an order that has not shipped"),
        "addresses": (make_address_change, "change the shipping address of an order that has not shipped"),
        "lookups": (make_lookup, "give the tracking number of a parcel in transit (checked on the reply)"),
    }
    for kind, (generator, description) in kinds.items():
        _FAMILIES[f"builtin:{kind}"] = ScenarioFamily(f"builtin:{kind}", (generator,), BUILTIN_SIZE, description)
    _FAMILIES["builtin:actions"] = ScenarioFamily(
        "builtin:actions",
        (make_refund, make_cancellation, make_address_change),
        BUILTIN_SIZE,
        "refunds, cancellations and address changes, interleaved (verified on the orders alone)",
    )
    _FAMILIES["builtin:all"] = ScenarioFamily(
        "builtin:all",
        (make_refund, make_cancellation, make_address_change, make_lookup),
        BUILTIN_SIZE,
        "all four built-in kinds, interleaved",
    )


_register_builtins()


def scenario_families() -> dict[str, str]:
    """The registered family names, each with its one-line description."""
    return {name: family.description for name, family in _FAMILIES.items()}


def load_scenarios(spec: str = "builtin:all", n: int | None = None, seed: int = 0) -> list[Scenario]:
    """Generate the scenarios of a registered family, deterministically.

    Args:
        spec: a family name from :func:`scenario_families`, e.g. ``"builtin:refunds"``.
        n: how many scenarios (default: the family's ``default_size``, 200 for the built-ins).
        seed: the generation seed; the same ``(spec, n, seed)`` always gives the same scenarios.

    Returns:
        ``n`` scenarios, kinds interleaved when the family has several.

    Example:
        >>> scenarios = load_scenarios("builtin:refunds", n=3, seed=0)
        >>> [s.scenario_id for s in scenarios]
        ['refund-0', 'refund-1', 'refund-2']
    """
    family = _FAMILIES.get(spec)
    if family is None:
        raise ValueError(f"unknown scenario family {spec!r}; the registered ones are {', '.join(sorted(_FAMILIES))}")
    if n is None:
        n = family.default_size
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return family.build(n, seed)
