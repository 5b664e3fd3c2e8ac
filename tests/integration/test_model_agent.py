"""The model agent and the simulated customer over real HTTP: a scripted OpenAI-compatible server on 127.0.0.1.

The server (``tests/policy_server.py``) plays a support policy that looks the order up and refunds it, a policy that
asks for the order number first, one that makes wrong calls, one that echoes its API key, and a customer.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from whileai.cli.main import app
from whileai.errors import BadInput, EndpointUnavailable
from whileai.simulations.customer import customer_model
from whileai.simulations.model_agent import model_agent
from whileai.simulations.rollouts import SimulatorUnavailableError, simulate
from whileai.simulations.scenarios import load_scenarios
from whileai.simulations.support_tools import SUPPORT_TOOLS

KEY_ENV = "WHILEAI_TEST_POLICY_KEY"
KEY = "sk-test-policy-5ecr3t-0a1b2c3d4e5f"
REFUNDS = load_scenarios("builtin:refunds", n=6, seed=0)


def _load_policy_server() -> ModuleType:
    if "policy_server" in sys.modules:
        return sys.modules["policy_server"]
    path = Path(__file__).resolve().parents[1] / "policy_server.py"
    spec = importlib.util.spec_from_file_location("policy_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["policy_server"] = module
    spec.loader.exec_module(module)
    return module


policy_server = _load_policy_server()


@pytest.fixture
def server() -> Iterator[object]:
    with policy_server.PolicyServer() as running:
        yield running


@pytest.fixture
def make_agent(server):
    """``make_agent(model, **settings)``: a model agent on ``server`` (fast failures), closed after the test."""
    built = []

    def make(model: str = "support-bot", **settings):
        settings = {"timeout_s": 5.0, "max_retries": 1, **settings}
        agent = model_agent(settings.pop("base_url", server.url), model, **settings)
        built.append(agent)
        return agent

    yield make
    for agent in built:
        agent.close()


def dumps(rows: list[dict]) -> str:
    return json.dumps(rows, sort_keys=True)


# ---------------------------------------------------------------------------------------------- the model agent


def test_a_served_policy_refunds_end_to_end_and_the_verifier_passes(server, make_agent) -> None:
    agent = make_agent()
    rows = simulate(REFUNDS, agent, n=2, seed=3)

    assert [row["scenario_id"] for row in rows] == [s.scenario_id for s in REFUNDS for _ in range(2)]
    assert all(row["passed"] and row["reward"] == 1.0 for row in rows), [r["reason"] for r in rows]
    for row in rows:
        assert "<tool_call>lookup_order" in row["final_text"] and "<tool_call>refund_order" in row["final_text"]
        assert row["final_text"].splitlines()[-1].startswith("agent: Done: I refunded $")
        assert row["tool_calls"] in (2, 3) and row["turns"] == row["tool_calls"] + 1  # list_orders when no id named

    # The wire format: the tools' schemas, the assistant's tool_calls sent back with matching tool messages, a seed.
    bodies = server.bodies("support-bot")
    assert all(body["tools"] == [dict(tool) for tool in SUPPORT_TOOLS] for body in bodies)
    last = bodies[-1]["messages"]
    assert [m["role"] for m in last[:2]] == ["system", "user"] and last[1]["content"] == REFUNDS[-1].prompt
    calls = [m for m in last if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in last if m["role"] == "tool"]
    assert [c["tool_calls"][0]["id"] for c in calls] == [r["tool_call_id"] for r in results]
    assert json.loads(results[-1]["content"])["ok"] is True  # the refund's result went back to the model
    seeds = [body["seed"] for body in bodies]
    assert all(isinstance(seed, int) and seed >= 0 for seed in seeds) and len(set(seeds)) == len(seeds)

    # Same seeds, same requests, same rows (the server is deterministic, as vLLM is per seed).
    assert dumps(simulate(REFUNDS, agent, n=2, seed=3)) == dumps(rows)
    assert [body["seed"] for body in server.bodies("support-bot")[len(bodies) :]] == seeds
    assert agent.stats.calls == 2 * len(bodies) and agent.stats.tokens_out > 0


def test_several_tool_calls_in_one_answer_are_played_in_order(server, make_agent) -> None:
    named = next(s for s in load_scenarios("builtin:refunds", n=30) if "ORD-" in s.prompt)  # no list_orders needed
    row = simulate([named], make_agent("support-bot-parallel"), n=1)[0]
    assert row["passed"] and row["tool_calls"] == 2 and row["turns"] == 3, row["reason"]
    # Two requests: the first answered with both calls; the second carries that answer and both results, in order.
    first, second = (body["messages"] for body in server.bodies())
    assert [m["role"] for m in second] == [m["role"] for m in first] + ["assistant", "tool", "tool"]
    asked = second[-3]["tool_calls"]
    assert [c["function"]["name"] for c in asked] == ["lookup_order", "refund_order"]
    assert [c["id"] for c in asked] == [m["tool_call_id"] for m in second[-2:]]


def test_calls_written_as_bare_json_run_only_when_the_agent_reads_them(server, make_agent) -> None:
    plain = simulate(REFUNDS[:2], make_agent("json-bot"), n=1)
    assert all(not row["passed"] and row["tool_calls"] == 0 for row in plain)  # the text was taken for a reply
    read = simulate(REFUNDS[:2], make_agent("json-bot", tool_calls="json"), n=1)
    assert all(row["passed"] for row in read), [row["reason"] for row in read]
    assert all("<tool_call>lookup_order" in row["final_text"] for row in read)
    # the model's own text stays its message, each tool's result after it
    last = server.bodies("json-bot")[-1]["messages"]
    fenced = [m for m in last if m["role"] == "assistant" and "```json" in (m.get("content") or "")]
    assert fenced and all("tool_calls" not in m for m in fenced)
    assert [m["role"] for m in last].count("tool") == len(fenced)


def test_a_wrong_tool_call_is_an_error_result_in_the_transcript_not_an_exception(server, make_agent) -> None:
    row = simulate(REFUNDS[:1], make_agent("wrong-tool"), n=1)[0]
    lines = row["final_text"].splitlines()
    assert lines[0] == '<tool_call>delete_everything {"confirm": true}</tool_call>'
    assert "unknown tool 'delete_everything'" in lines[1]
    assert lines[2].startswith('<tool_call>refund_order {"arguments_not_a_json_object": ')
    assert "unexpected argument(s) arguments_not_a_json_object" in lines[3]
    assert not row["passed"] and row["tool_calls"] == 2
    # The model was told: each error went back as the tool message of its call.
    last = server.bodies()[-1]["messages"]
    assert [json.loads(m["content"])["error"][:12] for m in last if m["role"] == "tool"] == [
        "unknown tool",
        "refund_order",
    ]


def test_rows_come_back_in_scenario_order_on_four_threads(server, make_agent) -> None:
    agent = make_agent()
    scenarios = load_scenarios("builtin:refunds", n=12, seed=1)
    threaded = simulate(scenarios, agent, n=2, seed=5, max_workers=4)
    assert [(r["scenario_id"], r["sample"]) for r in threaded] == [
        (s.scenario_id, sample) for s in scenarios for sample in range(2)
    ]
    assert dumps(threaded) == dumps(simulate(scenarios, agent, n=2, seed=5, max_workers=1))


def test_retries_then_answers(server, make_agent) -> None:
    server.fail_next(503)
    agent = make_agent()
    assert simulate(REFUNDS[:1], agent, n=1)[0]["passed"]
    assert agent.stats.retries == 1


def test_a_closed_port_is_endpoint_unavailable_and_later_calls_fail_at_once(make_agent) -> None:
    agent = make_agent(base_url=policy_server.closed_port_url(), max_retries=0)
    with pytest.raises(EndpointUnavailable, match=r"policy at http://127\.0\.0\.1:\d+/v1 \(model support-bot\)") as e:
        simulate(REFUNDS[:3], agent, n=2, max_workers=2)
    assert e.value.exit_code == 4 and "connection" in str(e.value)
    with pytest.raises(EndpointUnavailable):
        agent.start(tools=SUPPORT_TOOLS, seed=0).act([])


def test_a_server_that_refuses_tools_gets_a_hint(server, make_agent) -> None:
    server.fail_next(400)
    with pytest.raises(EndpointUnavailable, match=r"HTTP 400.*--enable-auto-tool-choice"):
        simulate(REFUNDS[:1], make_agent(), n=1)


def test_the_api_key_appears_in_no_row_or_error(server, make_agent, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    agent = make_agent("echo-key", api_key_env=KEY_ENV)
    rows = simulate(REFUNDS[:2], agent, n=1)
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # the key is used...
    assert "[secret hidden]" in rows[0]["final_text"]  # ...and the server echoed it
    closed = make_agent(base_url=policy_server.closed_port_url(), api_key_env=KEY_ENV, max_retries=0)
    with pytest.raises(EndpointUnavailable) as caught:
        simulate(REFUNDS[:1], closed, n=1)
    seen = dumps(rows) + str(caught.value) + repr(caught.value) + repr(agent) + repr(agent.client)
    assert KEY not in seen

    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(BadInput, match=f"api_key_env names {KEY_ENV}, which is not set"):
        model_agent(server.url, "support-bot", api_key_env=KEY_ENV)
    with pytest.raises(BadInput, match="api_key_env") as pasted:
        model_agent(server.url, "support-bot", api_key_env=KEY)
    assert KEY not in str(pasted.value)


# ---------------------------------------------------------------------------------------------- the simulated customer


def test_an_llm_customer_answers_the_agents_question(server, make_agent) -> None:
    customer = customer_model(server.url, "customer", timeout_s=5.0, max_retries=1)
    try:
        rows = simulate(REFUNDS[:4], make_agent("asker"), n=2, simulator=True, customer=customer, max_workers=2)
    finally:
        customer.close()
    assert all(row["passed"] for row in rows), [r["reason"] for r in rows]
    for row, scenario in zip(rows[::2], REFUNDS[:4], strict=True):
        target = scenario.goal["order_id"]
        assert (
            f"agent: Could you tell me the order number, please?\ncustomer: Sure, it's {target}." in row["final_text"]
        )
    asked = server.bodies("customer")
    assert len(asked) == len(rows) and all("tools" not in body for body in asked)
    first = asked[0]["messages"]
    shown = next(s for s in REFUNDS[:4] if s.prompt in first[0]["content"])  # rollouts ran on two threads
    assert first[0]["role"] == "system" and shown.customer_reply in first[0]["content"]
    assert str(shown.goal["amount_cents"]) not in first[0]["content"]  # the verifier's goal is not shown
    assert [m["role"] for m in first[1:]] == ["user"] and first[1]["content"].endswith("order number, please?")
    assert customer.stats.calls == len(rows)


def test_simulator_without_a_customer_says_what_to_pass(make_agent) -> None:
    with pytest.raises(SimulatorUnavailableError, match=r"none is configured: pass customer=.*customer_model"):
        simulate(REFUNDS[:1], make_agent(), simulator=True)
    customer = customer_model("http://127.0.0.1:9/v1", "customer")
    with pytest.raises(ValueError, match="only with simulator=True"):
        simulate(REFUNDS[:1], make_agent(), customer=customer)


# ---------------------------------------------------------------------------------------------- the command line

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_whileai_simulate_with_a_served_policy(server, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    common = ("simulate", "--scenarios", "builtin:refunds", "--num-scenarios", 3, "--n", 2, "--out", out)
    result = invoke(*common, "--agent", "model", "--base-url", server.url, "--model", "support-bot")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(row["passed"] for row in rows)
    # the reference, read off what the model did: it looked the order up first and never checked after refunding
    assert all((row["flaws"], row["quality"], row["hack"]) == (["no_verification"], 0.9, False) for row in rows)
    assert result.stdout.startswith("pass@1 1.00") and len(result.stdout.splitlines()) == 1  # results on stdout
    assert "policy: " in result.stderr and " calls (0 retries)" in result.stderr  # the endpoint's counters on stderr

    served = ("--agent", "model", "--base-url", server.url)
    simulated = invoke(*common, *served, "--model", "asker", "--simulator", "--customer-model", "customer")
    assert simulated.exit_code == 0, simulated.stderr
    assert "customer: Sure, it's ORD-" in out.read_text() and "customer: " in simulated.stderr

    closed_url = policy_server.closed_port_url()
    closed = invoke(*common, "--agent", "model", "--base-url", closed_url, "--model", "m", "--max-retries", 0)
    assert closed.exit_code == 4 and "policy at http://127.0.0.1" in closed.stderr

    json_calls = invoke(*common, *served, "--model", "json-bot", "--tool-calls", "json")
    assert json_calls.exit_code == 0 and json_calls.stdout.startswith("pass@1 1.00"), json_calls.stderr
    assert invoke(*common, "--tool-calls", "json").exit_code == 2  # the seeded agent makes its own calls
    assert invoke(*common, "--agent", "model").exit_code == 2  # no endpoint
    no_customer = invoke(*common, "--simulator")
    assert no_customer.exit_code == 2 and "--customer-base-url" in no_customer.stderr
    assert invoke(*common, "--agent", "telepathy").exit_code == 2
