"""``whileai simulate``: rollouts of the built-in support scenarios by the seeded agent, as rows for the spread gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from whileai.cli.console import err, guarded, say
from whileai.errors import BadInput


@guarded
def simulate(
    out_path: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the rows (.jsonl).")] = None,
    scenarios: Annotated[
        str | None, typer.Option(help="Scenario family: builtin:refunds, builtin:all, ... [builtin:all]")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="The agent: seeded (scripted, offline). [seeded]")] = None,
    n: Annotated[int | None, typer.Option("--n", help="Rollouts per scenario (the group size). [8]")] = None,
    num_scenarios: Annotated[int | None, typer.Option(help="Use only the first N scenarios.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the scenarios and the agent. [0]")] = None,
    recipe: Annotated[
        Path | None, typer.Option("--recipe", "-r", help="Read defaults from a recipe's simulate section.")
    ] = None,
) -> None:
    """Simulate support conversations offline (no key, no GPU) and write graded rows.

    Example: whileai simulate --scenarios builtin:refunds --n 8 --out rows.jsonl && whileai spread rows.jsonl

    Exit codes: 0 ok; 2 bad input.
    """
    from whileai.config.schema import SimulateSection
    from whileai.simulations.agents import seeded_agent
    from whileai.simulations.passrate import score
    from whileai.simulations.scenarios import load_scenarios
    from whileai.simulations.simulate import simulate as run

    section = SimulateSection()
    if recipe is not None:
        from whileai.config import load_recipe

        section = load_recipe(recipe).recipe.simulate or section
    updates = {"scenarios": scenarios, "agent": agent, "n": n, "num_scenarios": num_scenarios, "seed": seed}
    try:
        section = SimulateSection.model_validate(
            {**section.model_dump(), **{k: v for k, v in updates.items() if v is not None}}
        )
    except Exception as error:
        raise BadInput(f"simulate: {error}") from None
    if section.agent != "seeded":
        raise BadInput(f"--agent {section.agent!r}: the offline agent is 'seeded'")
    if out_path is None:
        raise BadInput("give --out rows.jsonl")
    try:
        chosen = load_scenarios(section.scenarios, n=section.num_scenarios, seed=section.seed)
    except ValueError as error:
        raise BadInput(f"--scenarios: {error}") from None
    with Progress(
        TextColumn("simulating"),
        BarColumn(bar_width=None),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task("simulate", total=len(chosen))
        rows = run(
            chosen,
            seeded_agent(seed=section.seed),
            n=section.n,
            seed=section.seed,
            progress=lambda done, total: bar.update(task, completed=done),
        )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    say(f"whileai: wrote {len(rows)} rows ({len(chosen)} scenarios x {section.n}) to {out_path}")
    typer.echo(str(score(rows).pass_at(1)))
