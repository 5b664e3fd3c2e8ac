"""``whileai eval``: a trained run on held-out prompts, its pass rate with an interval and its grader's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from whileai.cli.console import guarded, out, print_json, say
from whileai.cli.spread import JsonOption


@guarded
def eval_run(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="A run folder whileai train wrote.")],
    checkpoint: Annotated[
        str | None, typer.Option(help="A checkpoint-N folder of the run instead of its final model.")
    ] = None,
    prompts: Annotated[
        int | None,
        typer.Option(
            help="Held-out prompts when the recipe holds none out (data.eval_prompts); by default 32, or the rows "
            "the dataset has past the trained ones when fewer.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="torch's seed for the sampling.")] = 0,
    initial: Annotated[
        bool, typer.Option("--initial", help="The model the run started from, on the same prompts (eval-initial.json).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Evaluate a trained run on prompts it did not train on: pass rate with a 95% interval, mean length, and the
    grader's spread and hacks on the trained policy's completions.

    Example: whileai eval runs/tiny_cpu_gar && whileai report runs/tiny_cpu_binary runs/tiny_cpu_gar

    The prompts are the recipe's data.eval_prompts, or the next --prompts prompts of its task after those it trained
    on (32, or the rows a dataset has left); each gets the run's num_generations completions, sampled as training
    samples them. The figures go to RUN/eval.json, which whileai report shows beside the run's training figures.
    --initial measures the model the run started from on the same prompts, with the same seed
    (RUN/eval-initial.json). A multi-turn task runs through TRL's own evaluation loop with its tools.

    Exit codes: 0 evaluated; 2 bad input (no run, no saved model, no held-out prompt left); 3 torch/trl missing
    (pip install 'whileai-grpo[train]'); 130 interrupted (Ctrl-C).
    """
    from whileai.config.build import run_setup
    from whileai.training.held_out import evaluate_run

    setup = run_setup(run)
    result = evaluate_run(setup, run, checkpoint=checkpoint, prompts=prompts, seed=seed, say=say, initial=initial)
    if as_json:
        print_json(result.data)
        return
    for line in result.lines():
        out.print(line, markup=False)
    say(f"whileai: wrote {result.path}")
