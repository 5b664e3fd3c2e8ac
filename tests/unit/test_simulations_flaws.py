"""The flaws a transcript shows (``whileai.simulations.flaws``), the reference of a served model's rollouts: on every
passing rollout of the seeded agent they are the flaws the agent recorded as it made them."""

from __future__ import annotations

from typing import Any

from whileai.simulations.agents import Event, ToolCall, seeded_agent
from whileai.simulations.flaws import transcript_flaws
from whileai.simulations.rollouts import simulate


class _Unaccounted:
    """The seeded agent with its account hidden: simulate must read the flaws off the transcript."""

    def __init__(self) -> None:
        self._agent = seeded_agent(seed=0)

    def start(self, **kwargs: Any) -> Any:
        episode = self._agent.start(**kwargs)

        class Episode:
            def act(self, transcript: Any) -> Any:
                return episode.act(transcript)

        return Episode()


def test_the_transcript_tells_every_passing_rollouts_flaws_as_the_agent_recorded_them() -> None:
    recorded = simulate("builtin:all", seeded_agent(seed=0), n=8, seed=0, reference=True)
    read = simulate("builtin:all", _Unaccounted(), n=8, seed=0, reference=True)
    passes = [(a, b) for a, b in zip(recorded, read, strict=True) if a["passed"]]
    assert len(passes) > 1000 and all(a["final_text"] == b["final_text"] for a, b in passes)
    assert {flaw for a, _ in passes for flaw in a["flaws"]} >= {
        "invented_id",
        "repeated_call",
        "failed_call",
        "no_lookup",
        "no_verification",
    }  # fmt: skip  (every rule is exercised)
    for a, b in passes:
        assert sorted(a["flaws"]) == sorted(b["flaws"]), a["final_text"]
        assert (a["quality"], a["hack"]) == (b["quality"], b["hack"])


def _call(name: str, **arguments: Any) -> Event:
    return Event("agent", call=ToolCall(name, arguments))


def test_a_careful_rollout_has_no_flaw_and_a_check_after_acting_is_no_repeat() -> None:
    transcript = [
        Event("customer", text="Please cancel ORD-1045."),
        _call("lookup_order", order_id="ORD-1045"),
        Event("tool", result={"order": {"order_id": "ORD-1045"}}),
        _call("cancel_order", order_id="ORD-1045"),
        Event("tool", result={"ok": True, "order_id": "ORD-1045"}),
        _call("lookup_order", order_id="ORD-1045"),
        Event("tool", result={"order": {"order_id": "ORD-1045", "status": "cancelled"}}),
        Event("agent", text="Done."),
    ]
    assert transcript_flaws(transcript) == []


def test_a_refused_call_a_repeat_and_an_id_only_a_refusal_named() -> None:
    transcript = [
        Event("customer", text="Refund my lamp please."),
        _call("refund_order", order_id="ORD-1041", amount=5.0),
        Event("tool", result={"error": "no order ORD-1041"}),  # refused: a failed call, its id now named
        _call("list_orders"),
        Event("tool", result={"orders": [{"order_id": "ORD-1043", "item": "lamp"}]}),
        _call("list_orders"),  # the same question again
        Event("tool", result={"orders": [{"order_id": "ORD-1043", "item": "lamp"}]}),
        _call("refund_order", order_id="ORD-1043", amount=5.0),
        Event("tool", result={"ok": True}),
    ]
    assert transcript_flaws(transcript) == ["no_lookup", "no_verification", "failed_call", "repeated_call"]
