"""``whileai simulate``: rollouts of the built-in support scenarios as rows for the spread gate.

The agent is the seeded scripted one (offline, no key) or a served model (``--agent model --base-url --model``); the
customer's later turns are scripted, or played by a served model with ``--simulator``. The endpoint options are the
command line's own (each left out keeps ``whileai.http.endpoint.EndpointSettings``'s default, from
``whileai.defaults``): a recipe's ``simulate``
section sets the scenarios, the agent's kind, n and the seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from whileai.cli.console import err, guarded, say, stdout
from whileai.defaults import (
    DEFAULT_CUSTOMER_TEMPERATURE,
    DEFAULT_POLICY_TEMPERATURE,
    ENDPOINT_MAX_RETRIES,
    ENDPOINT_MAX_TOKENS,
    ENDPOINT_TIMEOUT_S,
    SIMULATE_REMOTE_WORKERS,
)
from whileai.errors import BadInput


# Typer declares each option in the signature: the function is long by its options, its body is one screen.
@guarded
def simulate(
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KEY=VALUE]...",
            help="Overrides of the recipe's simulate section, e.g. simulate.n=4 (the options below win over them).",
        ),
    ] = None,
    out_path: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the rows (.jsonl).")] = None,
    scenarios: Annotated[
        str | None, typer.Option(help="Scenario family: builtin:refunds, builtin:all, ... [builtin:all]")
    ] = None,
    agent: Annotated[
        str | None, typer.Option(help="The agent: seeded (scripted, offline) or model (a served model). [seeded]")
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="Rollouts per scenario (the group size). [8]")] = None,
    num_scenarios: Annotated[int | None, typer.Option(help="Use only the first N scenarios.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the scenarios and the agent. [0]")] = None,
    recipe: Annotated[
        Path | None, typer.Option("--recipe", "-r", help="Read defaults from a recipe's simulate section.")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="--agent model: the OpenAI-compatible server, up to /v1.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="--agent model: the served model's name.")] = None,
    tool_calls: Annotated[
        str,
        typer.Option(
            help="--agent model: 'server', the tool calls the server parsed; 'json', also calls written as bare JSON "
            "in an answer (a small model on llama.cpp's server, as training's model.tool_calls: json). [server]"
        ),
    ] = "server",
    api_key_env: Annotated[
        str | None, typer.Option(help="Name of the environment variable holding the API key (never the key).")
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            help=f"--agent model: sampling temperature. [{DEFAULT_POLICY_TEMPERATURE:g}, GRPO's; a customer "
            f"{DEFAULT_CUSTOMER_TEMPERATURE:g}]"
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help=f"Most tokens per model answer. [{ENDPOINT_MAX_TOKENS}; a customer 256]"),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help=f"Seconds one HTTP call may take. [{ENDPOINT_TIMEOUT_S:g}]")
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option(help=f"Retries of a failed HTTP call (connection, timeout, 429, 5xx). [{ENDPOINT_MAX_RETRIES}]"),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help=f"Scenarios run at once. [{SIMULATE_REMOTE_WORKERS} with a served model, else 1]")
    ] = None,
    simulator: Annotated[
        bool, typer.Option("--simulator", help="A served model plays the customer (else the customer is scripted).")
    ] = False,
    customer_base_url: Annotated[
        str | None, typer.Option(help="--simulator: the customer's server. [--base-url]")
    ] = None,
    customer_model: Annotated[str | None, typer.Option(help="--simulator: the customer's model. [--model]")] = None,
    customer_api_key_env: Annotated[
        str | None, typer.Option(help="--simulator: the customer's API key variable. [--api-key-env]")
    ] = None,
) -> None:
    """Simulate support conversations and write graded rows: offline (no key, no GPU) or with a served model.

    Every row also says what the rollout did wrong (flaws, a quality, hack), the reference that whileai judge-eval
    measures a grader against: the seeded agent's own account, or what a served model's transcript shows.

    Example: whileai simulate --scenarios builtin:refunds --n 8 --out rows.jsonl && whileai spread rows.jsonl

    From a recipe, with overrides: whileai simulate --recipe recipes/refund_agent_gar.yaml simulate.n=4 -o rows.jsonl

    Served model: whileai simulate --agent model --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B -o r.jsonl

    Exit codes: 0 ok; 2 bad input; 4 the model's endpoint is unavailable; 130 interrupted (Ctrl-C).
    """
    from whileai.simulations.passrate import score
    from whileai.simulations.scenarios import load_scenarios

    given = {"scenarios": scenarios, "agent": agent, "n": n, "num_scenarios": num_scenarios, "seed": seed}
    section = _section(recipe, overrides or [], given)
    if out_path is None:
        raise BadInput("give --out rows.jsonl")
    try:
        chosen = load_scenarios(section.scenarios, n=section.num_scenarios, seed=section.seed)
    except ValueError as error:
        raise BadInput(f"--scenarios: {error}") from None
    if workers is not None and workers < 1:
        raise BadInput(f"--workers must be at least 1, got {workers}")
    endpoint = {"max_tokens": max_tokens, "timeout_s": timeout, "max_retries": max_retries}
    endpoint = {key: value for key, value in endpoint.items() if value is not None}
    policy = _agent(section, base_url, model, api_key_env, temperature, endpoint, simulator, tool_calls)
    customer = None
    if simulator:
        url, name = customer_base_url or base_url, customer_model or model
        customer = _customer(url, name, customer_api_key_env or api_key_env, endpoint)
    elif customer_base_url or customer_model or customer_api_key_env:
        raise BadInput("--customer-base-url, --customer-model and --customer-api-key-env need --simulator")
    remote = section.agent == "model" or simulator
    rows = _run(chosen, policy, customer, section, simulator, workers or (SIMULATE_REMOTE_WORKERS if remote else 1))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    say(f"whileai: wrote {len(rows)} rows ({len(chosen)} scenarios x {section.n}) to {out_path}")
    for role, served in (("policy", policy), ("customer", customer)):
        if served is not None and hasattr(served, "stats"):
            stats = served.stats.as_dict()
            say(
                f"{role}: {stats['calls']} calls ({stats['retries']} retries), tokens {stats['tokens_in']} in / "
                f"{stats['tokens_out']} out"
            )
    stdout.write(f"{score(rows).pass_at(1)}\n")


def _section(recipe: Path | None, overrides: list[str], given: dict[str, Any]) -> Any:
    """The simulate section: the recipe's (or the defaults) with ``overrides``, then the options given."""
    from pydantic import ValidationError

    from whileai.config import load_recipe
    from whileai.config.load import default_recipe, is_override
    from whileai.config.schema import SimulateSection

    wrong = [o for o in overrides if not is_override(o)]
    if wrong:
        raise BadInput(f"unexpected argument {wrong[0]!r}: simulate takes options and key=value overrides")
    loaded = load_recipe(recipe, overrides) if recipe is not None else default_recipe(overrides)
    section = loaded.recipe.simulate or SimulateSection()
    try:
        return SimulateSection.model_validate(
            {**section.model_dump(), **{k: v for k, v in given.items() if v is not None}}
        )
    except ValidationError as error:
        first = error.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "simulate"
        raise BadInput(f"{option}: {first['msg']} (got {first.get('input')!r})") from None


def _agent(
    section: Any,
    base_url: str | None,
    model: str | None,
    api_key_env: str | None,
    temperature: float | None,
    endpoint: dict[str, Any],
    simulator: bool,
    tool_calls: str = "server",
) -> Any:
    """The seeded agent, or a served model's (``--agent model``)."""
    from whileai.simulations.agents import seeded_agent

    if tool_calls not in ("server", "json"):
        raise BadInput(f"--tool-calls must be server or json, got {tool_calls!r}")
    if section.agent == "model":
        if not base_url or not model:
            raise BadInput("--agent model needs --base-url URL and --model NAME (an OpenAI-compatible server)")
        from whileai.simulations.model_agent import model_agent

        sampling = {} if temperature is None else {"temperature": temperature}
        return model_agent(base_url, model, api_key_env=api_key_env, tool_calls=tool_calls, **sampling, **endpoint)
    if tool_calls != "server":
        raise BadInput("--tool-calls is for --agent model: the seeded agent makes its calls itself")
    if (base_url or model) and not simulator:
        raise BadInput("--base-url and --model are for --agent model or --simulator; the seeded agent needs none")
    return seeded_agent(seed=section.seed)


def _customer(base_url: str | None, model: str | None, api_key_env: str | None, endpoint: dict[str, Any]) -> Any:
    """The customer a served model plays (``--simulator``)."""
    if not base_url or not model:
        raise BadInput(
            "--simulator needs an LLM to play the customer: give --customer-base-url URL and --customer-model "
            "NAME (or --base-url and --model)"
        )
    from whileai.simulations.customer import customer_model as build_customer

    return build_customer(base_url, model, api_key_env=api_key_env, **endpoint)


def _run(chosen: Any, policy: Any, customer: Any, section: Any, simulator: bool, workers: int) -> list[dict[str, Any]]:
    """The rollouts, with a bar of the scenarios done; every served client is closed, whatever happens."""
    from whileai.progress import phase_bar
    from whileai.simulations.rollouts import simulate as run

    with phase_bar("simulating", "scenarios", err) as bar:
        task = bar.add_task("simulate", total=len(chosen))
        try:
            return run(
                chosen,
                policy,
                n=section.n,
                simulator=simulator,
                seed=section.seed,
                max_workers=workers,
                progress=lambda done, total: bar.update(task, completed=done),
                customer=customer,
                reference=True,
            )
        finally:
            for served in (policy, customer):
                if served is not None and hasattr(served, "close"):
                    served.close()
