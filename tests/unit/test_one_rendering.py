"""The spread gate and training grade the same text for the same rollout.

``whileai simulate`` writes rows (what the spread gate grades); TRL hands the reward function the same conversation
as chat messages, the tool answers included (``role: tool``). Both go through one renderer. The test replays seeded
rollouts through the TRL environment exactly as TRL's tool loop would (an assistant message with the tool call, then
a tool message with the tool's string answer) and compares the text the grader reads in training with the row's
``final_text``.
"""

from __future__ import annotations

from whileai.config.schema import ScriptedRule
from whileai.grading.scripted import ScriptedGrader
from whileai.rows.text import completion_text
from whileai.simulations.agents import seeded_agent
from whileai.simulations.environment import environment_conversation
from whileai.simulations.rollouts import rollout
from whileai.simulations.scenarios import load_scenarios


def trl_conversation(scenario, agent, seed: str) -> tuple[list[dict], bool]:
    """The completion TRL 1.16 hands the reward function for this rollout, and whether the verdict passed.

    ``environment_conversation`` plays TRL's tool loop: after each assistant message with a tool call, a
    ``{"role": "tool", "name": ..., "content": str(answer)}`` message; a reply ends the rollout.
    """
    messages, verdict = environment_conversation(scenario, agent, seed=seed)
    completion = messages[2:]
    for message in completion:
        if message["role"] == "tool":
            assert isinstance(message["content"], str) and message["name"]
    return completion, verdict.passed


def test_training_and_the_spread_gate_read_the_same_text() -> None:
    scenarios = load_scenarios("builtin:actions", n=40, seed=0)
    agent = seeded_agent(seed=0)
    compared = 0
    for scenario in scenarios:
        for sample in range(4):
            seed = f"0:{scenario.scenario_id}:{sample}"
            row = rollout(scenario, agent, seed=seed)
            if "customer:" in row["final_text"]:
                continue  # a customer's answer has no place in a TRL rollout
            messages, passed = trl_conversation(scenario, agent, seed)
            assert completion_text(messages) == row["final_text"]
            assert passed == row["passed"]
            compared += 1
    assert compared > 100


def test_a_correct_refund_is_not_a_hack_in_training() -> None:
    """The shipped rule calls a pass that names an id no tool returned a hack; in training it must see the tools'
    answers, or every correct refund that names its order is flagged."""
    rule = ScriptedGrader(ScriptedRule(unseen_id_pattern=r"ORD-\d+"))
    scenarios = load_scenarios("builtin:refunds", n=40, seed=0)
    agent = seeded_agent(seed=0)
    checked = 0
    for scenario in scenarios:
        messages, passed = trl_conversation(scenario, agent, f"0:{scenario.scenario_id}:0")
        text = completion_text(messages)
        final = messages[-1]["content"]
        if passed and scenario.goal["order_id"] in final and any(m["role"] == "tool" for m in messages):
            assert not rule.is_hack(text), text
            checked += 1
    assert checked > 5
