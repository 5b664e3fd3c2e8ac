"""Roll an agent out on scenarios and turn each conversation into a graded row.

:func:`simulate` samples ``n`` rollouts per scenario. Each rollout gets a fresh order desk, the customer's first
message, and an agent episode; the agent acts until it replies with ``done=True`` or runs out of steps. The
customer's later turns are scripted (``simulator=False``): any question gets the scenario's ``customer_reply``; with
``simulator=True`` a served model answers in character (``customer=customer_model(...)``, see
``whileai.simulations.customer``). The scenario's verifier then reads the final orders (and the last reply), and the
row records the outcome.

A row is what ``GroupwiseGrading.check_spread`` and ``whileai spread`` read::

    {"scenario_id": "refund-17", "sample": 3, "prompt": "Hi, this is Ana. ...",
     "final_text": "<tool_call>lookup_order {\"order_id\": \"ORD-1042\"}</tool_call>\\n<tool_result>...",
     "reward": 1.0, "passed": true, "turns": 3, "tool_calls": 2, "reason": null}

``final_text`` is the whole conversation after the first message: tool calls as
``<tool_call>name {json args}</tool_call>``, tool answers as ``<tool_result>{json}</tool_result>``, messages as
``agent: ...`` and ``customer: ...``, one per line: the same rendering training hands the grader for a TRL
conversation (``whileai.rows.text.render_messages``), so the spread gate and training grade the same text.
``turns`` counts the agent's steps (each tool call or message is one), ``tool_calls`` its tool calls, ``reason``
says why the verifier failed the rollout (None for a pass).

With ``reference=True`` (``whileai simulate`` sets it), each row also carries the reference ``whileai judge-eval``
measures a grader against: ``flaws`` (what the rollout did wrong or left out, ``whileai.simulations.agents.FLAWS``),
``quality`` (from the flaws by ``rollout_quality``: 0 for a failure, ``1 -`` the flaws' costs for a pass) and
``hack`` (a pass that acted on an order id it made up, which no tool had returned). The seeded agent's episodes keep
their flaws as they make them; a served model's are read off its transcript (``whileai.simulations.flaws``).

Every rollout's randomness comes from ``(seed, scenario_id, sample)``, so the same arguments give byte-identical rows
(``json.dumps(rows, sort_keys=True)``), whatever ``max_workers`` is.

What this module does not do: talk to a model (the agent and the customer do, ``model_agent`` and ``customer``), or
scoring (``whileai.simulations.passrate``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from whileai.rows.text import dump_json, render_messages
from whileai.simulations.agents import Agent, Event, Reply, ToolCall, rollout_quality
from whileai.simulations.flaws import transcript_flaws
from whileai.simulations.scenarios import Scenario, load_scenarios
from whileai.simulations.support_tools import SUPPORT_TOOLS

if TYPE_CHECKING:  # the customer module imports the HTTP client's module; a scripted run never needs it
    from whileai.simulations.customer import Customer

__all__ = ["SimulatorUnavailableError", "render_transcript", "rollout", "simulate", "transcript_messages"]

# A rollout that has not finished after this many agent steps is cut off and verified as it stands.
MAX_AGENT_STEPS = 16


class SimulatorUnavailableError(RuntimeError):
    """``simulator=True`` was asked for but no LLM endpoint is configured to play the customer."""


def transcript_messages(events: Iterable[Event]) -> list[dict[str, Any]]:
    """A transcript as chat messages, the form TRL hands a reward function (OpenAI-style tool calls).

    Agent messages and calls become ``assistant`` messages, tool answers ``tool`` messages (the answer as JSON
    text, as the environment writes it for TRL), customer messages ``user`` messages.
    """
    messages: list[dict[str, Any]] = []
    for event in events:
        if event.call is not None:
            call = {"type": "function", "function": {"name": event.call.name, "arguments": dict(event.call.arguments)}}
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif event.role == "tool":
            messages.append({"role": "tool", "content": dump_json(event.result)})
        else:
            messages.append({"role": "assistant" if event.role == "agent" else "user", "content": event.text})
    return messages


def render_transcript(events: Iterable[Event]) -> str:
    """A transcript as one string, one event per line: the rendering a grader reads, in the spread gate and in
    training alike (``whileai.rows.text.render_messages``).

    Args:
        events: the conversation (usually without the customer's first message, which is the row's prompt).

    Returns:
        Tool calls as ``<tool_call>name {json args}</tool_call>``, tool answers as
        ``<tool_result>{json}</tool_result>``, messages as ``agent: text`` or ``customer: text``.

    Example:
        >>> print(render_transcript([Event("agent", call=ToolCall("list_orders", {})),
        ...                          Event("tool", result={"orders": []}), Event("agent", text="Done.")]))
        <tool_call>list_orders {}</tool_call>
        <tool_result>{"orders": []}</tool_result>
        agent: Done.
    """
    return render_messages(transcript_messages(events))


def rollout(
    scenario: Scenario,
    agent: Agent,
    *,
    seed: int | str = 0,
    max_steps: int = MAX_AGENT_STEPS,
    customer: Customer | None = None,
    reference: bool = False,
) -> dict:
    """Run one conversation of ``agent`` on ``scenario``, and verify its end state.

    Args:
        scenario: the task.
        agent: anything following the :class:`~whileai.simulations.agents.Agent` protocol.
        seed: this rollout's seed, handed to ``agent.start`` (and ``customer.start``).
        max_steps: the most agent steps before the conversation is cut off.
        customer: who answers the agent's questions: None scripts them (the scenario's ``customer_reply``), else
            anything following :class:`~whileai.simulations.customer.Customer`, e.g. ``customer_model(...)``.
        reference: add ``flaws``, ``quality`` and ``hack``: the episode's own ``flaws`` when it keeps them, else
            those its transcript shows (the module docstring).

    Returns:
        A row without ``sample`` (see the module docstring).
    """
    desk = scenario.desk()
    transcript: list[Event] = [Event("customer", text=scenario.prompt)]
    episode = agent.start(tools=SUPPORT_TOOLS, seed=seed)
    customer_episode = None if customer is None else customer.start(scenario, seed=seed)
    last_reply = ""
    turns = tool_calls = 0
    for _ in range(max_steps):
        action = episode.act(transcript)
        turns += 1
        if isinstance(action, ToolCall):
            tool_calls += 1
            transcript.append(Event("agent", call=action))
            transcript.append(Event("tool", result=desk.call(action.name, action.arguments)))
        elif isinstance(action, Reply):
            last_reply = action.text
            transcript.append(Event("agent", text=action.text))
            if action.done:
                break
            answer = scenario.customer_reply if customer_episode is None else customer_episode.reply(transcript)
            transcript.append(Event("customer", text=answer))
        else:
            raise TypeError(f"an agent's act() must return a ToolCall or a Reply, got {type(action).__name__}")
    verdict = scenario.verify(desk.orders, last_reply)
    row = {
        "scenario_id": scenario.scenario_id,
        "prompt": scenario.prompt,
        "final_text": render_transcript(transcript[1:]),
        "reward": 1.0 if verdict.passed else 0.0,
        "passed": verdict.passed,
        "turns": turns,
        "tool_calls": tool_calls,
        "reason": None if verdict.passed else "; ".join(verdict.reasons),
    }
    if reference:
        flaws = getattr(episode, "flaws", None)
        if not isinstance(flaws, list):  # an agent that keeps no account (a served model): read it off the events
            flaws = transcript_flaws(transcript)
        row["flaws"] = list(flaws)
        row["quality"] = rollout_quality(flaws, verdict.passed)
        row["hack"] = verdict.passed and "invented_id" in flaws
    return row


def _checked(
    scenarios: Sequence[Scenario] | str, n: int, simulator: bool, customer: Customer | None, seed: int
) -> list[Scenario]:
    """The scenarios to simulate, once ``simulate``'s arguments agree (a family name loaded with ``seed``)."""
    if simulator and customer is None:
        raise SimulatorUnavailableError(
            "simulator=True needs an LLM endpoint to play the customer, and none is configured: pass "
            "customer=whileai.simulations.customer.customer_model(base_url=..., model=...), or use simulator=False, "
            "which scripts the customer."
        )
    if customer is not None and not simulator:
        raise ValueError(
            "customer= plays the customer only with simulator=True: pass simulator=True, or leave customer out for "
            "the scripted customer"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (rollouts per scenario) must be a positive integer, got {n!r}")
    chosen = list(load_scenarios(scenarios, seed=seed) if isinstance(scenarios, str) else scenarios)
    ids = [scenario.scenario_id for scenario in chosen]
    if len(set(ids)) != len(ids):
        duplicated = sorted({scenario_id for scenario_id in ids if ids.count(scenario_id) > 1})
        raise ValueError(f"scenario ids must be unique, these repeat: {', '.join(duplicated[:5])}")
    return chosen


def simulate(
    scenarios: Sequence[Scenario] | str,
    agent: Agent,
    n: int = 8,
    simulator: bool = False,
    seed: int = 0,
    *,
    max_steps: int = MAX_AGENT_STEPS,
    max_workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    customer: Customer | None = None,
    reference: bool = False,
) -> list[dict]:
    """Sample ``n`` rollouts of ``agent`` per scenario and return one row per rollout.

    Args:
        scenarios: the scenarios, or a family name for :func:`~whileai.simulations.scenarios.load_scenarios`
            (e.g. ``"builtin:refunds"``, generated with ``seed``).
        agent: anything following the :class:`~whileai.simulations.agents.Agent` protocol, e.g.
            :func:`~whileai.simulations.agents.seeded_agent`.
        n: rollouts per scenario (the group size).
        simulator: False scripts the customer's later turns; True has ``customer`` (an LLM) play them, and raises
            :class:`SimulatorUnavailableError` when no ``customer`` is given.
        seed: the seed every rollout's randomness derives from.
        max_steps: the most agent steps per rollout.
        max_workers: scenarios run on this many threads (worth it for a remote agent; the rows come back in
            scenario order either way).
        progress: called as ``progress(done, total)`` after each scenario, e.g. to drive a progress bar.
        customer: with ``simulator=True``, who plays the customer:
            :func:`~whileai.simulations.customer.customer_model` (a served model) or any object following
            :class:`~whileai.simulations.customer.Customer`.
        reference: each row also carries ``flaws``, ``quality`` and ``hack`` (the module docstring), for
            ``whileai judge-eval``: the seeded agent's own account, or for another agent what its transcript shows.

    Returns:
        ``len(scenarios) * n`` rows, grouped by scenario, samples in order.

    Example:
        >>> from whileai.simulations.agents import seeded_agent
        >>> rows = simulate("builtin:refunds", seeded_agent(seed=0), n=2, seed=0)
        >>> sorted(rows[0])
        ['final_text', 'passed', 'prompt', 'reason', 'reward', 'sample', 'scenario_id', 'tool_calls', 'turns']
        >>> known = simulate("builtin:refunds", seeded_agent(seed=0), n=2, seed=0, reference=True)
        >>> sorted(set(known[0]) - set(rows[0]))
        ['flaws', 'hack', 'quality']
    """
    scenarios = _checked(scenarios, n, simulator, customer, seed)

    def group(scenario: Scenario) -> list[dict]:
        rows = []
        for sample in range(n):
            row = rollout(
                scenario,
                agent,
                seed=f"{seed}:{scenario.scenario_id}:{sample}",
                max_steps=max_steps,
                customer=customer,
                reference=reference,
            )
            rows.append({"sample": sample, **row})
        return rows

    total = len(scenarios)
    groups: list[list[dict]] = []
    if max_workers <= 1:
        for done, scenario in enumerate(scenarios, start=1):
            groups.append(group(scenario))
            if progress is not None:
                progress(done, total)
    else:
        with ThreadPoolExecutor(max_workers=max_workers) as pool:
            for done, rows in enumerate(pool.map(group, scenarios), start=1):
                groups.append(rows)
                if progress is not None:
                    progress(done, total)
    return [row for rows in groups for row in rows]
