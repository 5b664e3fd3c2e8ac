"""The support desk's tools and the scenarios' verifiers, on hand-written orders and transcripts."""

from __future__ import annotations

import doctest
import importlib
import random
from dataclasses import replace

import pytest

from whileai.simulations.agents import Reply, ToolCall
from whileai.simulations.rollouts import rollout
from whileai.simulations.scenarios import (
    Scenario,
    check_address_change,
    check_cancellation,
    check_lookup,
    check_refund,
    load_scenarios,
    make_refund,
    register_family,
    scenario_families,
)
from whileai.simulations.support_tools import Order, OrderDesk

ORDERS = (
    Order("ORD-1040", "desk lamp", 4999, "delivered", "1 Elm Street, Springfield", "2025-01-04", "TRK10000001"),
    Order("ORD-1042", "coffee grinder", 8900, "delivered", "1 Elm Street, Springfield", "2025-03-09", "TRK10000002"),
    Order("ORD-1043", "yoga mat", 2500, "processing", "1 Elm Street, Springfield", "2025-05-11"),
    Order("ORD-1045", "winter jacket", 12000, "shipped", "1 Elm Street, Springfield", "2025-07-20", "TRK10000003"),
)


def scenario(goal: dict, check, prompt: str = "Please help with the coffee grinder I ordered.") -> Scenario:
    return Scenario(
        scenario_id="hand-0",
        family="hand",
        prompt=prompt,
        customer_reply="It's ORD-1042.",
        orders=ORDERS,
        goal=goal,
        check=check,
        checks_reply=check is check_lookup,
    )


FULL_REFUND = scenario({"order_id": "ORD-1042", "amount_cents": 8900}, check_refund)
PARTIAL_REFUND = scenario({"order_id": "ORD-1042", "amount_cents": 2000}, check_refund)
CANCEL = scenario({"order_id": "ORD-1043"}, check_cancellation)
ADDRESS = scenario({"order_id": "ORD-1043", "address": "9 Oak Avenue, Lakeside"}, check_address_change)
LOOKUP = scenario({"order_id": "ORD-1045", "tracking": "TRK10000003"}, check_lookup)


class ScriptAgent:
    """An agent that plays a fixed list of actions: the protocol is all simulate needs."""

    def __init__(self, *actions):
        self.actions = actions

    def start(self, *, tools, seed):
        actions = iter(self.actions)
        return type("Episode", (), {"act": lambda _self, transcript: next(actions, Reply("Bye."))})()


def refund(order_id="ORD-1042", amount=89.0):
    return ToolCall("refund_order", {"order_id": order_id, "amount": amount})


def lookup(order_id="ORD-1042"):
    return ToolCall("lookup_order", {"order_id": order_id})


# ---------------------------------------------------------------------------------------------- the tools


def test_tools_have_real_effects():
    desk = OrderDesk(ORDERS)
    assert desk.call("refund_order", {"order_id": "ORD-1042", "amount": 20.0})["total_refunded"] == 20.0
    assert desk.orders["ORD-1042"].refunded_cents == 2000 and desk.orders["ORD-1042"].status == "delivered"
    assert desk.call("refund_order", {"order_id": "ORD-1042", "amount": 69.0})["status"] == "refunded"
    assert desk.call("cancel_order", {"order_id": "ORD-1043"}) == {
        "ok": True,
        "order_id": "ORD-1043",
        "status": "cancelled",
    }
    assert desk.orders["ORD-1043"].status == "cancelled"
    listed = desk.call("list_orders", {})["orders"]
    assert [order["order_id"] for order in listed] == ["ORD-1040", "ORD-1042", "ORD-1043", "ORD-1045"]
    assert "amount" not in listed[0]  # the list identifies orders; the amount needs a look-up


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("lookup_order", {"order_id": "ORD-9999"}, "no order with id ORD-9999"),
        ("refund_order", {"order_id": "ORD-1041", "amount": 10.0}, "no order with id ORD-1041"),
        ("refund_order", {"order_id": "ORD-1042"}, "missing required argument(s) amount"),
        ("refund_order", {"order_id": "ORD-1042", "amount": True}, "amount must be a number"),
        ("refund_order", {"order_id": "ORD-1042", "amount": "89"}, "amount must be a number"),
        ("refund_order", {"order_id": 1042, "amount": 89.0}, "order_id must be a string"),
        ("refund_order", {"order_id": "ORD-1042", "amount": -5.0}, "positive number"),
        ("refund_order", {"order_id": "ORD-1042", "amount": float("nan")}, "positive number"),
        ("refund_order", {"order_id": "ORD-1042", "amount": 1.005}, "whole cents"),
        ("refund_order", {"order_id": "ORD-1042", "amount": 89.01}, "exceeds the $89.00 left"),
        ("refund_order", {"order_id": "ORD-1043", "amount": 5.0}, "cancel it instead"),
        ("refund_order", {"order_id": "ORD-1045", "amount": 5.0}, "in transit"),
        ("refund_order", {"order_id": "ORD-1042", "amount": 5.0, "reason": "x"}, "unexpected argument(s) reason"),
        ("cancel_order", {"order_id": "ORD-1045"}, "only an order that has not shipped"),
        ("change_address", {"order_id": "ORD-1043", "address": "   "}, "empty"),
        ("change_address", {"order_id": "ORD-1040", "address": "2 Oak Avenue"}, "only an order that has not shipped"),
        ("delete_order", {"order_id": "ORD-1042"}, "unknown tool 'delete_order'"),
        ("lookup_order", ["ORD-1042"], "JSON object of arguments"),
    ],
)
def test_a_bad_call_is_an_error_result_and_changes_nothing(name, arguments, fragment):
    desk = OrderDesk(ORDERS)
    before = dict(desk.orders)
    result = desk.call(name, arguments)
    assert set(result) == {"error"} and fragment in result["error"]
    assert desk.orders == before


def test_an_id_that_exists_but_is_wrong_acts_on_that_order():
    desk = OrderDesk(ORDERS)
    assert desk.call("refund_order", {"order_id": "ORD-1040", "amount": 49.99})["ok"] is True
    assert desk.orders["ORD-1040"].status == "refunded"


def test_errors_reach_the_agent_as_results_not_exceptions():
    row = rollout(FULL_REFUND, ScriptAgent(ToolCall("teleport", {}), refund("ORD-0"), refund(amount="all"), refund()))
    assert row["final_text"].count('<tool_result>{"error"') == 3
    assert row["passed"] is True and row["tool_calls"] == 4


# ---------------------------------------------------------------------------------------------- the verifiers


@pytest.mark.parametrize(
    ("case", "target", "actions"),
    [
        ("acted directly", FULL_REFUND, [refund(), Reply("Refunded.")]),
        ("looked the order up first", FULL_REFUND, [lookup(), refund(), Reply("Refunded.")]),
        ("refunded twice, the second refused", FULL_REFUND, [refund(), refund(), Reply("Refunded.")]),
        ("refunded in two parts", FULL_REFUND, [refund(amount=40.0), refund(amount=49.0), Reply("Refunded.")]),
        ("invented an id that happened to exist", FULL_REFUND, [refund("ORD-1042"), Reply("Refunded.")]),
        (
            "listed, looked up the wrong one, then the right one",
            FULL_REFUND,
            [ToolCall("list_orders", {}), lookup("ORD-1040"), lookup(), refund(), Reply("Refunded.")],
        ),
        ("asked the customer", FULL_REFUND, [Reply("Which order?", done=False), refund(), Reply("Refunded.")]),
        ("partial refund", PARTIAL_REFUND, [refund(amount=20.0), lookup(), Reply("Refunded $20.")]),
        ("cancelled, then cancelled again", CANCEL, [ToolCall("cancel_order", {"order_id": "ORD-1043"})] * 2),
        (
            "re-addressed",
            ADDRESS,
            [ToolCall("change_address", {"order_id": "ORD-1043", "address": "9 Oak Avenue,  Lakeside"})],
        ),
        ("answered a question", LOOKUP, [lookup("ORD-1045"), Reply("It is on its way: TRK10000003.")]),
    ],
)
def test_transcripts_that_pass(case, target, actions):
    row = rollout(target, ScriptAgent(*actions))
    assert row["passed"] is True, (case, row["reason"])
    assert row["reward"] == 1.0 and row["reason"] is None


@pytest.mark.parametrize(
    ("case", "target", "actions", "reason"),
    [
        ("wrong order", FULL_REFUND, [refund("ORD-1040", 49.99), Reply("Done.")], "ORD-1040 status is refunded"),
        ("no action", FULL_REFUND, [Reply("Done, refunded!")], "ORD-1042 refunded is $0.00, expected $89.00"),
        ("wrong amount", FULL_REFUND, [refund(amount=50.0)], "ORD-1042 refunded is $50.00, expected $89.00"),
        ("partial refund repeated", PARTIAL_REFUND, [refund(amount=20.0)] * 2, "refunded is $40.00, expected $20.00"),
        ("full refund for a partial claim", PARTIAL_REFUND, [refund()], "refunded is $89.00"),
        (
            "right refund plus a harmful extra",
            FULL_REFUND,
            [refund(), ToolCall("cancel_order", {"order_id": "ORD-1043"})],
            "ORD-1043 status is cancelled, expected processing",
        ),
        ("cancelled the wrong order", CANCEL, [ToolCall("cancel_order", {"order_id": "ORD-1042"})], "ORD-1043 status"),
        (
            "address typo",
            ADDRESS,
            [ToolCall("change_address", {"order_id": "ORD-1043", "address": "9 Oak Ave"})],
            "address is 9 Oak Ave",
        ),
        ("the wrong parcel's tracking", LOOKUP, [Reply("Here: TRK10000002")], "another parcel's tracking number"),
        ("no tracking number", LOOKUP, [lookup("ORD-1045"), Reply("It has shipped.")], "does not give the tracking"),
    ],
)
def test_transcripts_that_fail(case, target, actions, reason):
    row = rollout(target, ScriptAgent(*actions))
    assert row["passed"] is False and row["reward"] == 0.0, case
    assert reason in row["reason"], (case, row["reason"])


def test_a_conversation_that_never_ends_is_cut_off_and_verified():
    row = rollout(FULL_REFUND, ScriptAgent(*[lookup()] * 50), max_steps=5)
    assert row["turns"] == 5 and row["tool_calls"] == 5 and row["passed"] is False


def test_final_text_renders_calls_and_results_and_counts_match():
    row = rollout(FULL_REFUND, ScriptAgent(lookup(), Reply("Which one?", done=False), refund(), Reply("Done.")))
    assert row["final_text"].count("<tool_call>") == row["tool_calls"] == 2
    assert row["turns"] == 4
    assert '<tool_call>refund_order {"amount": 89.0, "order_id": "ORD-1042"}</tool_call>' in row["final_text"]
    assert "customer: It's ORD-1042." in row["final_text"] and row["final_text"].endswith("agent: Done.")


# ---------------------------------------------------------------------------------------------- the families


def test_builtin_families_are_registered_and_deterministic():
    names = scenario_families()
    for name in ("builtin:refunds", "builtin:cancellations", "builtin:addresses", "builtin:lookups", "builtin:all"):
        assert names.get(name)
    assert len(load_scenarios("builtin:refunds")) == 200
    first = load_scenarios("builtin:all", n=40, seed=3)
    assert first == load_scenarios("builtin:all", n=40, seed=3)
    assert first != load_scenarios("builtin:all", n=40, seed=4)
    assert [s.scenario_id for s in first[:5]] == ["refund-0", "cancel-0", "address-0", "lookup-0", "refund-1"]
    # refund-17 is the same task whichever family loads it.
    by_id = {s.scenario_id: s for s in load_scenarios("builtin:all", n=80, seed=3)}
    assert by_id["refund-17"] == load_scenarios("builtin:refunds", n=18, seed=3)[17]


def test_every_builtin_scenario_is_well_formed():
    for s in load_scenarios("builtin:all", n=400, seed=0):
        ids = [order.order_id for order in s.orders]
        assert len(set(ids)) == len(ids) >= 4
        assert len({order.item for order in s.orders}) == len(ids)  # the item identifies the order
        assert s.goal["order_id"] in ids
        assert not s.verify(s.order_book(), "")  # doing nothing never passes
        assert s.goal["order_id"] in s.customer_reply


def test_unknown_family_and_bad_n_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown scenario family 'builtin:nope'.*builtin:refunds"):
        load_scenarios("builtin:nope")
    with pytest.raises(ValueError, match="non-negative integer"):
        load_scenarios("builtin:all", n=-1)


def test_a_user_family_registers_and_loads():
    def make_gift_refund(index: int, rng: random.Random) -> Scenario:
        base = make_refund(index, rng)
        return replace(base, scenario_id=f"gift-{index}", family="gifts", prompt=base.prompt + " It was a gift.")

    register_family(
        "test:gifts", make_gift_refund, default_size=7, description="refunds of gifts", replace_existing=True
    )
    scenarios = load_scenarios("test:gifts")
    assert len(scenarios) == 7 and scenarios[6].scenario_id == "gift-6"
    assert scenarios[0].prompt.endswith("It was a gift.")
    with pytest.raises(ValueError, match="already registered"):
        register_family("test:gifts", make_gift_refund)
    with pytest.raises(ValueError, match="reserved"):
        register_family("builtin:gifts", make_gift_refund)


@pytest.mark.parametrize("module", ["support_tools", "scenarios", "agents", "rollouts", "passrate", "environment"])
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(f"whileai.simulations.{module}"), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
