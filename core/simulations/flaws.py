"""What a support rollout did wrong, read from its transcript: the reference for an agent that keeps no account of
its own (a served model).

The seeded agent records its flaws as it makes them (``whileai.simulations.agents``); a model agent's rollouts need
them read off what happened. :func:`transcript_flaws` applies the rules of :data:`~whileai.simulations.agents.FLAWS`
to the events, so ``whileai simulate --agent model`` rows carry ``flaws``, ``quality`` and ``hack`` too and
``whileai judge-eval`` can hold a grader to real rollouts. On a passing rollout the two accounts agree (a test runs
both over the seeded agent's rollouts); the rules:

- the *standing* action is the last action call (refund, cancel, re-address) the order desk accepted;
- ``invented_id``: the standing action names an order id that neither the customer nor any tool result had named
  before the call;
- ``no_lookup``: the standing action's order was not looked up (``lookup_order``) before the call;
- ``no_verification``: it was not looked up again after the call;
- ``failed_call``: an action call the desk refused (an ``error`` in its result), other than a repeat;
- ``repeated_call``: a call with the same tool and arguments as the call just before it (only its answer between:
  the same question asked again, or the same action made twice).

The flaws that only fail a rollout (the wrong order taken from a list, an action claimed but not made, giving up)
need the scenario's goal or the reply's intent; the verdict's ``reason`` says what went wrong there, and a failure's
quality is 0 whatever its flaws.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from whileai.simulations.agents import Event

__all__ = ["ACTION_TOOLS", "transcript_flaws"]

ACTION_TOOLS = frozenset({"refund_order", "cancel_order", "change_address"})
_ORDER_ID = re.compile(r"\bORD-\d+\b")


def _ids(text: str) -> set[str]:
    return set(_ORDER_ID.findall(text))


def transcript_flaws(transcript: Sequence[Event]) -> list[str]:
    """The flaws (keys of :data:`~whileai.simulations.agents.FLAWS`) of one rollout, in the order the module
    docstring lists its rules.

    Args:
        transcript: the whole conversation, the customer's first message included.

    Example:
        >>> from whileai.simulations.agents import ToolCall
        >>> transcript_flaws([
        ...     Event("customer", text="Please refund my lamp."),
        ...     Event("agent", call=ToolCall("refund_order", {"order_id": "ORD-1044", "amount": 5.0})),
        ...     Event("tool", result={"order": {"order_id": "ORD-1044"}}),
        ...     Event("agent", text="Done."),
        ... ])
        ['invented_id', 'no_lookup', 'no_verification']
    """
    seen: set[str] = set()  # ids the customer or a tool has named so far
    looked_up: set[str] = set()
    previous = ""  # the call before, as its tool and the JSON of its arguments
    standing: tuple[str, bool, bool, int] | None = None  # (order id, invented, looked up first, position)
    lookups_after: list[tuple[int, str]] = []
    failed = repeated = False
    for position, event in enumerate(transcript):
        if event.role == "customer":
            seen |= _ids(event.text)
            continue
        if event.role == "tool":
            seen |= _ids(json.dumps(event.result, sort_keys=True))
            continue
        if event.call is None:
            continue
        name, arguments = event.call.name, dict(event.call.arguments)
        key = name + json.dumps(arguments, sort_keys=True, default=str)
        repeat, previous = key == previous, key
        repeated |= repeat
        order_id = str(arguments.get("order_id", ""))
        if name == "lookup_order":
            looked_up.add(order_id)
            lookups_after.append((position, order_id))
        if name not in ACTION_TOOLS:
            continue
        result = transcript[position + 1].result if position + 1 < len(transcript) else None
        if isinstance(result, dict) and "error" in result:
            failed |= not repeat
            continue
        if not repeat:
            standing = (order_id, order_id not in seen, order_id in looked_up, position)
    flaws = []
    if standing is not None:
        order_id, invented, checked, at = standing
        if invented:
            flaws.append("invented_id")
        if not checked:
            flaws.append("no_lookup")
        if not any(position > at and looked == order_id for position, looked in lookups_after):
            flaws.append("no_verification")
    if failed:
        flaws.append("failed_call")
    if repeated:
        flaws.append("repeated_call")
    return flaws
