"""The order system a support agent works on: one customer's orders, and the tools that read and change them.

An :class:`OrderDesk` holds a customer's orders and answers the calls a support agent makes: ``list_orders``,
``lookup_order``, ``refund_order``, ``cancel_order`` and ``change_address``. Each tool checks its arguments the way a
real API does and answers with a JSON-ready dict. A bad call (an unknown tool, a missing argument, an id that does not
exist, a refund beyond what is left to refund, cancelling a parcel already on its way) answers ``{"error": ...}`` and
changes nothing; it never raises into the agent's loop. An id that exists but is not the order the customer meant is
*not* an error: the tool acts on that order, as a real system would, and the scenario's verifier sees the damage.

What this module does not do: know what the customer wanted (the scenarios and their verifiers in
``whileai.simulations.scenarios`` do), talk to a model, or keep anything between rollouts. Each rollout gets a fresh
desk built from the scenario's immutable :class:`Order` records.

Amounts are integer cents inside and dollars with at most two decimals at the API (``refund_order(amount=49.99)``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = [
    "ORDER_STATUSES",
    "SUPPORT_TOOLS",
    "Order",
    "OrderDesk",
    "cents_to_dollars",
]

OrderStatus = Literal["processing", "shipped", "delivered", "cancelled", "refunded"]

# The life of an order: placed orders are "processing" until they ship; a shipped parcel is "delivered" once it
# arrives. Only a processing order can be cancelled or re-addressed; only a delivered order can be refunded, and a
# refund of everything that was paid marks it "refunded".
ORDER_STATUSES: tuple[str, ...] = ("processing", "shipped", "delivered", "cancelled", "refunded")

MAX_ADDRESS_LENGTH = 200


def cents_to_dollars(cents: int) -> float:
    """Integer cents as the API's dollar figure: ``cents_to_dollars(4999) == 49.99``."""
    return round(cents / 100, 2)


@dataclass(frozen=True)
class Order:
    """One order as the shop's database holds it.

    Attributes:
        order_id: the customer-facing id, e.g. ``"ORD-1042"``.
        item: what was bought, e.g. ``"coffee grinder"``; unique among one customer's orders.
        amount_cents: what the customer paid, in cents.
        status: one of :data:`ORDER_STATUSES`.
        address: the shipping address.
        placed: the order date, ISO format.
        tracking: the carrier's tracking number once the order has shipped, else None.
        refunded_cents: how much of ``amount_cents`` has been refunded so far.
    """

    order_id: str
    item: str
    amount_cents: int
    status: str
    address: str
    placed: str
    tracking: str | None = None
    refunded_cents: int = 0

    def as_record(self) -> dict[str, Any]:
        """The order as ``lookup_order`` shows it (dollars, not cents)."""
        return {
            "order_id": self.order_id,
            "item": self.item,
            "amount": cents_to_dollars(self.amount_cents),
            "status": self.status,
            "address": self.address,
            "placed": self.placed,
            "tracking": self.tracking,
            "refunded": cents_to_dollars(self.refunded_cents),
        }

    def as_summary(self) -> dict[str, Any]:
        """The order as one line of ``list_orders``: enough to recognise it, not its amount or address."""
        return {"order_id": self.order_id, "item": self.item, "status": self.status, "placed": self.placed}


# The tools in the OpenAI function-calling format, for a model agent's request and for documentation. The desk's
# argument checks below follow these schemas.
SUPPORT_TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "list_orders",
            "description": "List the customer's orders: id, item, status and date of each.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Show one order in full: amount, status, address, tracking number, amount refunded.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "The order id, e.g. ORD-1042."}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "refund_order",
            "description": "Refund part or all of a delivered order. Refunds add up and cannot exceed what was paid.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "The order id, e.g. ORD-1042."},
                    "amount": {"type": "number", "description": "Dollars to refund, at most two decimals."},
                },
                "required": ["order_id", "amount"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order that has not shipped yet; the customer is not charged.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "The order id, e.g. ORD-1042."}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "change_address",
            "description": "Change the shipping address of an order that has not shipped yet.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "The order id, e.g. ORD-1042."},
                    "address": {"type": "string", "description": "The full new shipping address."},
                },
                "required": ["order_id", "address"],
            },
        },
    },
)

# Argument names and JSON types of each tool, read from SUPPORT_TOOLS so the two cannot drift apart.
_SIGNATURES: dict[str, dict[str, str]] = {
    tool["function"]["name"]: {
        name: spec["type"] for name, spec in tool["function"]["parameters"]["properties"].items()
    }
    for tool in SUPPORT_TOOLS
}


def _error(message: str) -> dict[str, Any]:
    return {"error": message}


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class OrderDesk:
    """One customer's orders and the support API over them, for the length of one rollout.

    Args:
        orders: the starting orders (immutable records; the desk replaces a record when a tool changes it).

    Example:
        >>> desk = OrderDesk([Order("ORD-1042", "desk lamp", 4999, "delivered", "1 Elm St", "2025-03-02")])
        >>> desk.call("refund_order", {"order_id": "ORD-1042", "amount": 49.99})["status"]
        'refunded'
        >>> desk.call("refund_order", {"order_id": "ORD-1042", "amount": 49.99})
        {'error': 'ORD-1042 is already fully refunded'}
        >>> desk.call("lookup_order", {"order_id": "ORD-1043"})
        {'error': 'no order with id ORD-1043'}
    """

    tool_names: tuple[str, ...] = tuple(_SIGNATURES)

    def __init__(self, orders: Iterable[Order]) -> None:
        self.orders: dict[str, Order] = {order.order_id: order for order in orders}

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run one tool call and return its result; a malformed call returns ``{"error": ...}``.

        Args:
            name: the tool's name, one of :attr:`tool_names`.
            arguments: the call's arguments by name (a JSON object), or None for none.

        Returns:
            The tool's JSON-ready answer. Errors are answers too: they change nothing.
        """
        signature = _SIGNATURES.get(name)
        if signature is None:
            return _error(f"unknown tool {name!r}; the tools are {', '.join(self.tool_names)}")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return _error(f"{name} takes a JSON object of arguments, got {type(arguments).__name__}")
        unexpected = sorted(set(arguments) - set(signature))
        if unexpected:
            return _error(f"{name} got unexpected argument(s) {', '.join(map(str, unexpected))}")
        missing = [arg for arg in signature if arg not in arguments]
        if missing:
            return _error(f"{name} is missing required argument(s) {', '.join(missing)}")
        for arg, json_type in signature.items():
            value = arguments[arg]
            if json_type == "string" and not isinstance(value, str):
                return _error(f"{name}: {arg} must be a string, got {value!r}")
            if json_type == "number" and not _is_number(value):
                return _error(f"{name}: {arg} must be a number, got {value!r}")
        return getattr(self, name)(**arguments)

    # The tools. Each takes already type-checked arguments and validates their meaning.

    def list_orders(self) -> dict[str, Any]:
        """All of the customer's orders, oldest first, as summaries."""
        ordered = sorted(self.orders.values(), key=lambda order: (order.placed, order.order_id))
        return {"orders": [order.as_summary() for order in ordered]}

    def lookup_order(self, order_id: str) -> dict[str, Any]:
        """One order in full, or an error when the id does not exist."""
        order = self.orders.get(order_id.strip())
        if order is None:
            return _error(f"no order with id {order_id}")
        return {"order": order.as_record()}

    def refund_order(self, order_id: str, amount: float) -> dict[str, Any]:
        """Refund ``amount`` dollars of a delivered order; refunds add up to at most what was paid."""
        order = self.orders.get(order_id.strip())
        if order is None:
            return _error(f"no order with id {order_id}")
        if not math.isfinite(amount) or amount <= 0:
            return _error(f"refund amount must be a positive number of dollars, got {amount!r}")
        cents = round(amount * 100)
        if abs(amount * 100 - cents) > 1e-6:
            return _error(f"refund amount must be in whole cents, got {amount!r}")
        if order.status == "refunded":
            return _error(f"{order.order_id} is already fully refunded")
        if order.status == "cancelled":
            return _error(f"{order.order_id} was cancelled before it shipped and was never charged")
        if order.status == "processing":
            return _error(f"{order.order_id} has not shipped yet; cancel it instead of refunding it")
        if order.status == "shipped":
            return _error(f"{order.order_id} is in transit; it can be refunded once it is delivered")
        remaining = order.amount_cents - order.refunded_cents
        if cents > remaining:
            return _error(
                f"a refund of ${cents_to_dollars(cents):.2f} exceeds the ${cents_to_dollars(remaining):.2f} "
                f"left to refund on {order.order_id}"
            )
        refunded = order.refunded_cents + cents
        status = "refunded" if refunded == order.amount_cents else order.status
        self.orders[order.order_id] = replace(order, refunded_cents=refunded, status=status)
        return {
            "ok": True,
            "order_id": order.order_id,
            "refunded": cents_to_dollars(cents),
            "total_refunded": cents_to_dollars(refunded),
            "status": status,
        }

    def cancel_order(self, order_id: str) -> dict[str, Any]:
        """Cancel an order that is still processing."""
        order = self.orders.get(order_id.strip())
        if order is None:
            return _error(f"no order with id {order_id}")
        if order.status == "cancelled":
            return _error(f"{order.order_id} is already cancelled")
        if order.status != "processing":
            return _error(f"{order.order_id} is {order.status}; only an order that has not shipped can be cancelled")
        self.orders[order.order_id] = replace(order, status="cancelled")
        return {"ok": True, "order_id": order.order_id, "status": "cancelled"}

    def change_address(self, order_id: str, address: str) -> dict[str, Any]:
        """Change the shipping address of an order that is still processing."""
        order = self.orders.get(order_id.strip())
        if order is None:
            return _error(f"no order with id {order_id}")
        address = " ".join(address.split())
        if not address:
            return _error("the new address is empty")
        if len(address) > MAX_ADDRESS_LENGTH:
            return _error(f"the new address is longer than {MAX_ADDRESS_LENGTH} characters")
        if order.status != "processing":
            return _error(f"{order.order_id} is {order.status}; only an order that has not shipped can be re-addressed")
        self.orders[order.order_id] = replace(order, address=address)
        return {"ok": True, "order_id": order.order_id, "address": address}
