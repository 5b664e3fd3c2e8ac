"""A trained run on prompts it did not train on: ``whileai eval RUN``.

The run folder holds everything needed: the resolved recipe it trained with (``recipe.yaml``), the model it saved
(``final/``, or a ``checkpoint-N/``). The prompts are the ones the recipe held out (``data.eval_prompts``), or else
the next ``prompts`` prompts of its task past those it trained on (a built-in task draws them from the same seeded
generator; a rows file gives its rows after the training ones). Each prompt gets ``num_generations`` completions,
sampled as training samples them (``whileai.training.sample``), scored by the recipe's verifier; the pass rate
counts each prompt's completions as a cluster (``whileai.stats.clustered_interval``, the interval ``whileai
report`` uses). A run trained with a grader has its groups graded too, as the spread gate grades them: the spread
of the grader's scores and the hacks it confirms on completions the trained policy writes.

A multi-turn task (TRL's ``environment_factory``) needs its tool loop: its completions come from TRL's own
evaluation (``GRPOTrainer.evaluate``, the trainer built as ``whileai train`` builds it, on the held-out rows), which
runs the tools as training does; a single-turn task is sampled as the spread gate samples it.

The result is written to ``eval.json`` in the run folder (``eval-checkpoint-N.json`` for a checkpoint), where
``whileai report`` reads it beside the run's training figures.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whileai.config.build import TrainSetup
from whileai.errors import BadInput
from whileai.stats import clustered_interval
from whileai.training.folder import EVAL_FORMAT, eval_file, run_lock, write_whole

__all__ = ["HeldOut", "evaluate_run"]


@dataclass(frozen=True)
class HeldOut:
    """What ``evaluate_run`` measured, as ``eval.json`` holds it (``as_dict``)."""

    data: dict[str, Any]
    path: Path | None = None  # the file it was written to

    def lines(self) -> list[str]:
        data, rate = self.data, self.data["pass_rate"]
        lines = [
            f"eval: {data['run']} ({data['model']}) on {data['prompts']} held-out prompt(s) x {data['generations']} "
            f"completion(s) ({data['source']})",
            f"pass rate {rate['rate']:.2f} (95% CI {rate['low']:.2f} to {rate['high']:.2f}, n={rate['n']} in "
            f"{rate['groups']} groups); mean length {data['mean_length_tokens']:.1f} tokens",
        ]
        if data.get("note"):
            lines.append(f"note: {data['note']}")
        grader = data.get("grader")
        if grader is None:
            lines.append("grader: none (a binary arm)")
        else:
            lines.append(
                f"grader: {grader['scores']} score(s) over {grader['groups']} group(s), std {grader['std']:.3f}, "
                f"{grader['near_median'] * 100:.0f}% within the gate's tolerance of the median (spread: "
                f"{grader['verdict']}); {grader['hacks']} hack(s) confirmed; {grader['fallbacks']} group(s) fell back"
            )
        return lines


# How many prompts past the trained ones ``whileai eval`` takes when not told (fewer when the dataset has fewer left).
EVAL_PROMPTS = 32


def _held_out_rows(
    setup: TrainSetup, prompts: int | None, say: Callable[[str], None]
) -> tuple[list[dict[str, Any]], str, Any]:
    """The held-out rows, where they come from, and the task that holds them; ``prompts`` None: up to
    ``EVAL_PROMPTS``, as many as the dataset has past the trained rows (said)."""
    from whileai.tasks.load import load_task

    task = load_task(setup)
    if task.eval_rows:
        return task.eval_rows, f"the recipe's data.eval_prompts: {len(task.eval_rows)}", task
    trained, wanted, dataset = len(task.rows), prompts or EVAL_PROMPTS, setup.data.dataset
    if not dataset.startswith("builtin:"):  # a built-in task draws as many as asked; a dataset has the rows it has
        left = len(load_task(setup.with_prompts(None)).rows) - trained
        if left < 1:
            raise BadInput(
                f"data.dataset {dataset}: the run trained on all its {trained} rows, and none is left to evaluate "
                "on: add rows to it (eval takes those past the trained ones), or train with data.eval_prompts=N to "
                "hold N out"
            )
        if wanted > left and prompts is not None:
            raise BadInput(
                f"--prompts {prompts}: data.dataset {dataset} has {left} row(s) past the {trained} the run trained "
                f"on: ask for at most {left}"
            )
        if wanted > left:
            say(f"whileai: eval on the {left} row(s) of data.dataset {dataset} past the {trained} the run trained on")
            wanted = left
    wider_task = load_task(setup.with_prompts(trained + wanted))
    rows = wider_task.rows[trained : trained + wanted]
    if not rows:
        raise BadInput(
            f"{setup.where}: no prompt past the {trained} the run trained on: hold some out with data.eval_prompts"
        )
    return rows, f"the {len(rows)} prompt(s) after the {trained} it trained on", wider_task


def _tool_loop_groups(
    model: Path,
    rows: list[dict[str, Any]],
    task: Any,
    verifier: Any,
    args: Any,
    tool_calls: str,
    verifier_timeout_s: float | None,
) -> tuple[list[Any], float | None]:
    """A multi-turn task's groups: TRL's evaluation loop on ``rows`` (tools run by the task's environment), each
    prompt's ``num_generations`` completions scored by the verifier as in training; and the mean completion length
    TRL measured (the tokens the model wrote, tool results left out, as training logs it)."""
    from transformers import AutoTokenizer

    from whileai.grading.trl import binary_reward
    from whileai.integrations.trl_trainer import grpo_trainer
    from whileai.rows.text import completion_text, prompt_text

    size = args.num_generations
    args.num_generations_eval = size
    args.per_device_eval_batch_size = size  # one prompt's group per evaluation batch
    scored = binary_reward(verifier, size, verifier_timeout_s=verifier_timeout_s)
    seen: list[tuple[str, Any, Any, float]] = []

    def whileai_eval(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
        rewards = scored(prompts, completions, **kwargs)
        # The task is the row's id column (an environment's prompt may be the same for every scenario).
        ids = kwargs.get("task_id") or kwargs.get("scenario_id") or [prompt_text(p) for p in prompts]
        seen.extend(zip(map(str, ids), prompts, completions, rewards, strict=True))
        return rewards

    trainer = grpo_trainer(
        model=str(model), reward=whileai_eval, args=args, train_rows=rows, eval_rows=rows,
        processing_class=AutoTokenizer.from_pretrained(str(model)), environment_factory=task.environment_factory,
        callbacks=[], where=str(model), tool_calls=tool_calls,
    )  # fmt: skip
    metrics = trainer.evaluate()
    groups = []
    for start in range(0, len(seen), size):
        members = seen[start : start + size]
        groups.append((members[0][0], [(r, prompt_text(p), completion_text(c)) for _, p, c, r in members]))
    return groups, metrics.get("eval_completions/mean_length")


def _model(run: Path, setup: TrainSetup, checkpoint: str | None, initial: bool) -> Path:
    """The model to evaluate: the run's final one, a checkpoint of it, or the one it started from."""
    if initial:
        from whileai.training.plan import model_path

        model = Path(model_path(setup))
    else:
        model = run / (checkpoint or "final")
    local = model.is_dir() or not initial  # the initial model may be a hub id
    if local and not (model / "config.json").is_file() and not (model / "adapter_config.json").is_file():
        raise BadInput(f"{model}: no saved model (a run that finished has final/; or name a checkpoint-N)")
    return model


def evaluate_run(
    setup: TrainSetup, run: Path, *, checkpoint: str | None = None, prompts: int | None = None, seed: int = 0,
    say: Callable[[str], None] = print, initial: bool = False,
) -> HeldOut:  # fmt: skip
    """Sample, verify and grade the model of the run in ``run`` (its setup: ``whileai.config.build.run_setup``) on
    held-out prompts (the module docstring says which and how), and
    write the figures to ``eval_file(run, checkpoint)``. ``initial``: the model the run started from instead (the
    recipe's model, what training's first step sampled), on the same prompts, to ``eval-initial.json``.

    Raises:
        BadInput: no run folder, no saved model, no held-out prompt, or another process writing into the run.
        MissingExtra: torch, transformers or trl not installed.
    """
    if prompts is not None and prompts < 1:
        raise BadInput(f"--prompts {prompts}: ask for 1 or more held-out prompts")
    if initial and checkpoint is not None:
        raise BadInput("--initial evaluates the model the run started from: leave out --checkpoint")
    if checkpoint is not None and not re.fullmatch(r"checkpoint-\d+", checkpoint):  # a folder of this run, by name
        kept = sorted(p.name for p in run.glob("checkpoint-*") if p.is_dir())
        raise BadInput(
            f"--checkpoint {checkpoint!r}: name one of the run's checkpoint-N folders ({', '.join(kept) or 'none'})"
        )
    with run_lock(run, "whileai eval"):  # it writes into the run: not beside a training run, or another eval
        return _evaluate(setup, run, checkpoint, prompts, seed, say, initial)


def _evaluate(
    setup: TrainSetup, run: Path, checkpoint: str | None, prompts: int | None, seed: int, say: Callable[[str], None],
    initial: bool,
) -> HeldOut:  # fmt: skip
    """``evaluate_run`` once the run folder is this process's."""
    from whileai.grading.gate import check_spread_groups
    from whileai.tasks.load import load_verifier
    from whileai.training.plan import Machine, grpo_kwargs, quiet_libraries
    from whileai.training.sample import group_passes, sample_groups

    rows, source, task = _held_out_rows(setup, prompts, say)
    model = _model(run, setup, checkpoint, initial)
    checkpoint = "initial" if initial else checkpoint
    quiet_libraries("whileai eval")
    from trl import GRPOConfig

    verifier = load_verifier(setup)
    with tempfile.TemporaryDirectory(prefix="whileai-eval-") as scratch:  # TRL's output_dir; the run's stays as it is
        kwargs = grpo_kwargs(setup, Machine.detect())
        kwargs.update(output_dir=scratch, seed=seed, log_completions=False)
        args = GRPOConfig(**kwargs)
        length = None
        limit = setup.verifier.timeout_s
        if task.environment_factory is not None:
            calls = setup.model.tool_calls
            groups, length = _tool_loop_groups(model, rows, task, verifier, args, calls, limit)
        else:
            groups = sample_groups(str(model), rows, verifier, args, seed=seed, verifier_timeout_s=limit)
    passes = group_passes(groups)
    from transformers import AutoTokenizer

    if length is None:  # a single-turn completion is all the model's own tokens
        tokenizer = AutoTokenizer.from_pretrained(str(model))
        counts = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for _, m in groups for _, _, text in m]
        length = sum(counts) / len(counts) if counts else 0.0
    data: dict[str, Any] = {
        "format": EVAL_FORMAT,
        "run": str(run),
        "model": "initial" if initial else model.name,
        "trained_steps": _trained_steps(run, checkpoint),
        "source": source,
        "prompts": len(rows),
        "generations": args.num_generations,
        "seed": seed,
        "pass_rate": clustered_interval(passes).as_dict(),
        "per_prompt": [
            {"prompt": task_id, "passes": y, "n": m} for (task_id, _), (y, m) in zip(groups, passes, strict=True)
        ],
        "mean_length_tokens": float(length),
        "grader": None,
    }
    grading = setup.make_grading(say)
    if grading is not None:
        report = check_spread_groups(grading, groups, strict=False)
        data["grader"] = {
            "verdict": report.verdict,
            "groups": report.groups,
            "scores": len(report.scores),
            "std": report.std or 0.0,
            "near_median": report.near_median or 0.0,
            "hacks": sum(len(v) for v in report.hacks.values()),
            "fallbacks": sum(report.failed.values()),
        }
    data["note"] = TINY_NOTE if setup.model.tiny is not None else None
    path = eval_file(run, checkpoint)
    write_whole(path, json.dumps(data, indent=1) + "\n")
    return HeldOut(data, path)


# Said with a tiny model's held-out figures, which read as a failure of training otherwise.
TINY_NOTE = (
    "a tiny random-weight model knows only the text it trained on (its tokenizer, its warm start): held-out prompts "
    "it never saw measure little"
)


def _trained_steps(run: Path, checkpoint: str | None) -> int | None:
    """The optimizer steps the evaluated model had trained: 0 for the initial model, N for checkpoint-N, the run's
    last step (``trainer_state.json``) for ``final/``; None when the run folder does not say."""
    if checkpoint == "initial":
        return 0
    if checkpoint is not None:
        number = checkpoint.rpartition("-")[2]
        return int(number) if number.isdigit() else None
    try:
        step = json.loads((run / "trainer_state.json").read_text()).get("global_step")
    except (OSError, ValueError):
        return None
    return step if isinstance(step, int) else None
