"""SupportEnvironment against TRL 1.16's environment_factory contract, without building a trainer."""

from __future__ import annotations

import inspect
import json

import pytest

from whileai.simulations.environment import RewardedSupportEnvironment, SupportEnvironment, environment_rows
from whileai.simulations.scenarios import load_scenarios

TOOLS = {"list_orders", "lookup_order", "refund_order", "cancel_order", "change_address"}


def trl_tools(environment):
    """What GRPOTrainer offers the model: every public function of the class except reset and get_reward."""
    members = inspect.getmembers(type(environment), predicate=inspect.isfunction)
    names = {name for name, _ in members}
    assert "reset" in names
    return {
        name: getattr(environment, name) for name in names if name not in ("reset", "get_reward") and name[0] != "_"
    }


def test_the_tools_trl_sees_are_exactly_the_desk_tools():
    assert set(trl_tools(SupportEnvironment())) == TOOLS
    assert set(trl_tools(RewardedSupportEnvironment())) == TOOLS


def owns_a_reward(environment_class) -> bool:
    """TRL 1.16 adds an environment's reward function when its class defines ``get_reward`` (grpo_trainer.py)."""
    return any(name == "get_reward" for name, _ in inspect.getmembers(environment_class, predicate=inspect.isfunction))


def test_the_environment_whileai_trains_with_owns_no_reward():
    """TRL would add get_reward as a second reward of weight 1 beside the grader's: A + A' instead of A'."""
    from whileai.tasks.load import _support

    task = _support(4, seed=0)
    assert not owns_a_reward(type(task.environment_factory()))
    assert owns_a_reward(RewardedSupportEnvironment)


def test_every_tool_has_a_json_schema_transformers_accepts():
    utils = pytest.importorskip("transformers.utils")
    for name, method in trl_tools(SupportEnvironment()).items():
        schema = utils.get_json_schema(method)
        assert schema["function"]["name"] == name
        assert schema["function"]["description"]
        for parameter in inspect.signature(method).parameters:
            assert schema["function"]["parameters"]["properties"][parameter]["description"]


def test_a_rollout_through_the_trl_contract():
    rows = environment_rows("builtin:actions", seed=0)
    assert len(rows) == 200 and rows[0]["prompt"][-1] == {"role": "user", "content": ""}
    scenarios = {s.scenario_id: s for s in load_scenarios("builtin:actions", seed=0)}
    environment = RewardedSupportEnvironment("builtin:actions", seed=0)
    for row in rows[:30]:
        scenario = scenarios[row["scenario_id"]]
        request = environment.reset(**row)  # TRL passes the whole dataset row
        assert request == scenario.prompt
        assert environment.get_reward() == 0.0  # nothing done yet
        tools = trl_tools(environment)
        assert "error" in json.loads(tools["lookup_order"](order_id="ORD-0001"))
        goal = scenario.goal
        if goal["action"] == "refund":
            answer = tools["refund_order"](order_id=goal["order_id"], amount=goal["amount_cents"] / 100)
        elif goal["action"] == "cancel":
            answer = tools["cancel_order"](order_id=goal["order_id"])
        else:
            answer = tools["change_address"](order_id=goal["order_id"], address=goal["address"])
        assert json.loads(answer)["ok"] is True
        assert environment.get_reward() == 1.0, environment.verdict
    # A reset starts from the scenario's orders again.
    environment.reset(**rows[0])
    assert environment.get_reward() == 0.0


def test_a_wrong_order_gets_no_reward():
    environment = RewardedSupportEnvironment("builtin:refunds")
    environment.reset(scenario_id="refund-0")
    scenario = environment.scenario
    other = next(o for o in scenario.orders if o.order_id != scenario.goal["order_id"])
    environment.cancel_order(other.order_id)
    environment.refund_order(other.order_id, 1.0)
    assert environment.get_reward() == 0.0


def test_without_a_dataset_resets_walk_the_scenarios_in_order():
    environment = SupportEnvironment("builtin:actions")
    first, second = environment.reset(prompt=[]), environment.reset(prompt=[])
    scenarios = load_scenarios("builtin:actions")
    assert (first, second) == (scenarios[0].prompt, scenarios[1].prompt)


def test_misuse_is_a_clear_error():
    with pytest.raises(ValueError, match="last reply"):
        SupportEnvironment("builtin:lookups")
    with pytest.raises(ValueError, match="unknown scenario_id 'refund-999'"):
        SupportEnvironment("builtin:refunds").reset(scenario_id="refund-999")
    fresh = SupportEnvironment()
    assert json.loads(fresh.list_orders()) == {"error": "no conversation is open"}
    assert fresh.verdict.passed is False
