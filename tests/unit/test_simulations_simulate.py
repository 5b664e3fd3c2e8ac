"""simulate() with the seeded agent: determinism, the page's kinds of pass and fail, and the spread gate."""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

import child_processes
import pytest

import whileai
from whileai.simulations.agents import Agent, Behaviour, Reply, seeded_agent
from whileai.simulations.rollouts import SimulatorUnavailableError, simulate
from whileai.simulations.scenarios import load_scenarios

SCENARIOS = load_scenarios("builtin:all", n=120, seed=0)


@pytest.fixture(scope="module")
def rows():
    return simulate(SCENARIOS, seeded_agent(seed=0), n=8, seed=0)


def dumps(rows):
    return json.dumps(rows, sort_keys=True)


def groups(rows):
    grouped = defaultdict(list)
    for row in rows:
        grouped[row["scenario_id"]].append(row)
    return grouped


def calls(row):
    """The tool calls of a row, parsed back from final_text: [(name, args)]."""
    found = re.findall(r"<tool_call>(\w+) (\{.*?\})</tool_call>", row["final_text"])
    return [(name, json.loads(arguments)) for name, arguments in found]


# ---------------------------------------------------------------------------------------------- determinism


def test_same_seed_gives_byte_identical_rows(rows):
    again = simulate(load_scenarios("builtin:all", n=120, seed=0), seeded_agent(seed=0), n=8, seed=0)
    assert dumps(again) == dumps(rows)
    threaded = simulate(SCENARIOS, seeded_agent(seed=0), n=8, seed=0, max_workers=4)
    assert dumps(threaded) == dumps(rows)


def test_a_different_seed_gives_different_rows(rows):
    assert dumps(simulate(SCENARIOS, seeded_agent(seed=0), n=8, seed=1)) != dumps(rows)
    assert dumps(simulate(SCENARIOS, seeded_agent(seed=1), n=8, seed=0)) != dumps(rows)


def test_rows_have_the_fields_spread_reads(rows):
    assert len(rows) == 120 * 8
    for row in rows[:50]:
        assert set(row) == {
            "scenario_id",
            "sample",
            "prompt",
            "final_text",
            "reward",
            "passed",
            "turns",
            "tool_calls",
            "reason",
        }
        assert row["reward"] == float(row["passed"])
        assert row["final_text"].count("<tool_call>") == row["tool_calls"] <= row["turns"]
    assert [row["sample"] for row in rows[:8]] == list(range(8))


def test_a_family_name_loads_its_scenarios():
    named = simulate("builtin:refunds", seeded_agent(), n=1, seed=5)
    assert dumps(named) == dumps(simulate(load_scenarios("builtin:refunds", seed=5), seeded_agent(), n=1, seed=5))
    assert len(named) == 200


# ---------------------------------------------------------------------------------------------- the seeded agent


def test_default_groups_are_mostly_mixed_with_passes_that_differ(rows):
    pass_rate = sum(row["passed"] for row in rows) / len(rows)
    assert 0.6 < pass_rate < 0.9
    grouped = groups(rows).values()
    mixed = [g for g in grouped if 0 < sum(r["passed"] for r in g) < len(g)]
    assert len(mixed) > 0.6 * len(grouped)
    pass_lengths = {row["tool_calls"] for row in rows if row["passed"]}
    assert {1, 2, 3, 4} <= pass_lengths


def test_the_pages_three_kinds_of_pass_occur(rows):
    goals = {s.scenario_id: s.goal for s in SCENARIOS}
    passes = [row for row in rows if row["passed"]]

    looked_up_first = [
        r for r in passes if calls(r) and calls(r)[0][0] == "lookup_order" and "lookup" not in r["scenario_id"]
    ]
    assert looked_up_first

    # The same refund twice: the API refused the second one, so the end state is right.
    refunded_twice = [r for r in passes if any(c[0] == "refund_order" and calls(r).count(c) == 2 for c in calls(r))]
    assert all('<tool_result>{"error"' in r["final_text"] for r in refunded_twice)
    assert any("is already fully refunded" in r["final_text"] for r in refunded_twice)

    # An id the agent made up: the request names none, the agent never listed the orders nor asked, and yet it
    # acted on the right order.
    invented = [
        r
        for r in passes
        if "ORD-" not in r["prompt"]
        and "customer:" not in r["final_text"]
        and "list_orders" not in r["final_text"]
        and calls(r)
    ]
    assert invented
    assert all(calls(r)[0][1]["order_id"] == goals[r["scenario_id"]]["order_id"] for r in invented)


def test_its_failures_are_realistic(rows):
    goals = {s.scenario_id: s.goal for s in SCENARIOS}
    failures = [row for row in rows if not row["passed"]]
    wrong_order = [
        r
        for r in failures
        if any(
            args.get("order_id") not in (None, goals[r["scenario_id"]]["order_id"]) and name != "lookup_order"
            for name, args in calls(r)
        )
    ]
    no_action = [r for r in failures if not any(name not in ("list_orders", "lookup_order") for name, _ in calls(r))]
    over_refund = [r for r in failures if any(c[0] == "refund_order" and calls(r).count(c) == 2 for c in calls(r))]
    assert wrong_order and no_action and over_refund


def test_a_careful_agent_solves_every_builtin_scenario():
    careful = seeded_agent(invent_id=0, wrong_order=0, skip_action=0, give_up=0, repeat_call=0, recover=1)
    assert all(row["passed"] for row in simulate(SCENARIOS, careful, n=2, seed=0))


def test_an_agent_that_gives_up_takes_no_action():
    quitting = simulate(SCENARIOS[:10], seeded_agent(give_up=1.0), n=2)
    assert not any(row["passed"] for row in quitting) and all(row["tool_calls"] == 0 for row in quitting)


def test_behaviour_rates_are_checked():
    with pytest.raises(TypeError, match="unknown behaviour invent_ids"):
        seeded_agent(invent_ids=0.5)
    with pytest.raises(ValueError, match="look_up_first must be a probability"):
        seeded_agent(look_up_first=1.5)
    assert isinstance(seeded_agent(), Agent)
    assert "look_up_first=0.4" in repr(seeded_agent())
    assert Behaviour().give_up == seeded_agent().behaviour.give_up


# ---------------------------------------------------------------------------------------------- simulate's contract


def test_simulator_true_says_no_endpoint_is_configured():
    with pytest.raises(SimulatorUnavailableError, match=r"needs an LLM endpoint.*none is configured"):
        simulate(SCENARIOS[:1], seeded_agent(), simulator=True)


def test_progress_is_reported_per_scenario():
    seen = []
    simulate(SCENARIOS[:5], seeded_agent(), n=2, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="positive integer"):
        simulate(SCENARIOS[:1], seeded_agent(), n=0)
    with pytest.raises(ValueError, match=r"unique.*refund-0"):
        simulate([SCENARIOS[0], SCENARIOS[0]], seeded_agent())

    class Rambler:
        def start(self, *, tools, seed):
            return type("Episode", (), {"act": lambda self, transcript: "hello"})()

    with pytest.raises(TypeError, match="ToolCall or a Reply, got str"):
        simulate(SCENARIOS[:1], Rambler())


def test_the_customer_is_scripted_without_a_simulator():
    class Asker:
        def start(self, *, tools, seed):
            replies = iter([Reply("Which order?", done=False), Reply("Thanks.")])
            return type("Episode", (), {"act": lambda self, transcript: next(replies)})()

    row = simulate(SCENARIOS[:1], Asker(), n=1)[0]
    assert f"customer: {SCENARIOS[0].customer_reply}" in row["final_text"] and row["turns"] == 2


# ---------------------------------------------------------------------------------------------- the spread gate


def rank_by_tool_calls(group):
    """The page's scripted grader: passes ranked by tool calls, fewest first, ties as inner lists."""
    by_calls = defaultdict(list)
    for item in group:
        if item["passed"]:
            by_calls[item["completion"].count("<tool_call>")].append(item["index"])
    return {"ranking": [by_calls[count] for count in sorted(by_calls)], "hacks": []}


def constant_grader(group):
    """Every pass tied: no spread."""
    return {"ranking": [[item["index"] for item in group if item["passed"]]], "hacks": []}


def test_seeded_rows_pass_the_spread_check_with_a_tool_call_grader(rows):
    report = whileai.GroupwiseGrading(grader=rank_by_tool_calls).check_spread(rows, strict=False)
    assert report.verdict == "yes"
    whileai.GroupwiseGrading(grader=rank_by_tool_calls).check_spread(rows, strict=True)


def test_a_constant_grader_fails_the_spread_check(rows):
    report = whileai.GroupwiseGrading(grader=constant_grader).check_spread(rows, strict=False)
    assert report.verdict == "no"
    with pytest.raises(ValueError):
        whileai.GroupwiseGrading(grader=constant_grader).check_spread(rows, strict=True)


def test_importing_the_simulations_stays_light():
    code = (
        "import sys, whileai.simulations.environment, whileai.simulations.rollouts, whileai.simulations.passrate;"
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'datasets', 'numpy') if m in sys.modules))"
    )
    output = child_processes.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
