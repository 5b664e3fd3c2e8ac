"""``whileai train``: the spread gate, then TRL's ``GRPOTrainer`` with the groupwise grader, writing a run you can read.

The run reads top to bottom:

1. write the resolved recipe into the run directory;
2. build the grader and run the spread gate on the recipe's rows (or on rollouts it simulates); refuse to start on
   no spread unless told to skip, and record either way;
3. build the task, the verifier and the model (a tiny random-weight model is built and saved first: TRL loads models
   by name, and vLLM's colocate mode reloads them by name);
4. build ``GRPOConfig`` from the recipe's trainer section, with vLLM colocate on CUDA when vLLM is installed;
5. train with ``reward_funcs=[grading.trl_reward(verifier, num_generations)]`` (or the verifier alone for a binary
   arm), logging each graded group to ``grading.jsonl`` and the grader's figures through TRL's ``log_metric``;
6. save the final model and ``whileai_run.json``.

The run directory: ``recipe.yaml``, ``whileai_run.json``, ``grading.jsonl``, ``trainer_state.json`` (in checkpoints
and at the end), ``completions/completions_*.parquet`` (TRL's completion logs, which ``whileai spread`` reads),
``checkpoint-*``, ``final/``. This is the only module of whileai that imports torch, transformers, trl and datasets
(inside ``run_training``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.config.load import LoadedRecipe
from whileai.errors import BadInput, MissingExtra
from whileai.grading.groupwise import GradedGroup, GroupwiseGrading, group_labels

__all__ = ["GradingLog", "TrainingResult", "binary_reward", "run_training"]


@dataclass
class TrainingResult:
    """How a run ended."""

    output_dir: Path
    spread: dict[str, Any] | None
    spread_failed: bool = False
    steps: int = 0
    grader: dict[str, Any] = field(default_factory=dict)


class GradingLog:
    """Appends each graded group to ``grading.jsonl`` (a resumed run continues the same file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, groups: list[GradedGroup], state: Any) -> None:
        step = getattr(state, "global_step", None)
        with self.path.open("a") as handle:
            for group in groups:
                handle.write(json.dumps({"step": step, **group.as_dict()}) + "\n")


def binary_reward(verifier: Callable[..., Sequence[float]], num_generations: int) -> Callable[..., list[float]]:
    """The verifier's reward as it is (a binary arm), logging the same pass rate and completion columns as
    ``GroupwiseGrading.trl_reward`` so two arms read alike."""

    def binary(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        rewards = [
            math.nan if r is None else float(r) for r in verifier(prompts=prompts, completions=completions, **kwargs)
        ]
        if callable(kwargs.get("log_metric")):
            kwargs["log_metric"]("whileai/pass_rate", sum(r > 0 for r in rewards) / max(len(rewards), 1))
        if callable(kwargs.get("log_extra")):
            kwargs["log_extra"]("whileai_reward", rewards)
            offset = _process_offset(len(rewards))
            kwargs["log_extra"](
                "whileai_group", group_labels(kwargs.get("trainer_state"), offset, len(rewards), num_generations)
            )
        return rewards

    return binary


def _process_offset(count: int) -> int:
    """Where this process's slice starts in the batch, for group labels (0 with one process)."""
    from whileai.training.distributed import TorchGather

    gather = TorchGather()
    if gather.world_size == 1:
        return 0
    return sum(gather.all_gather(count)[: gather.rank])


def _spread_gate(loaded: LoadedRecipe, say: Callable[[str], None]) -> tuple[dict[str, Any] | None, bool]:
    """(the gate's report or why it was skipped, whether it passed)."""
    from whileai.graders import build_grading
    from whileai.preflight import check_spread_file
    from whileai.rows import RowFields

    recipe = loaded.recipe
    if recipe.grader is None:
        return {"skipped": "no grader: a binary arm"}, True
    grading = build_grading(loaded)
    settings = recipe.spread
    if settings.rows:
        fields = RowFields(settings.group_key, settings.reward_key, settings.text_key, settings.prompt_key)
        run = check_spread_file(loaded.resolve(settings.rows), grading, fields, skip_bad=settings.skip_bad_rows)
        report = run.report
    elif recipe.simulate is not None:
        from whileai.simulations.agents import seeded_agent
        from whileai.simulations.scenarios import load_scenarios
        from whileai.simulations.simulate import simulate

        sim = recipe.simulate
        scenarios = load_scenarios(sim.scenarios, n=sim.num_scenarios, seed=sim.seed)
        rows = simulate(scenarios, seeded_agent(seed=sim.seed), n=sim.n, seed=sim.seed)
        report = grading.check_spread(rows, strict=False)
    else:
        return {"skipped": "no spread.rows or simulate section"}, True
    say(str(report))
    return report.as_dict(), report.ok


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def run_training(
    loaded: LoadedRecipe,
    *,
    skip_spread_gate: bool = False,
    resume: bool = False,
    say: Callable[[str], None] = print,
    callbacks: Sequence[Any] = (),
) -> TrainingResult:
    """Run the recipe: the spread gate, then GRPO with the groupwise grader.

    Args:
        loaded: a validated recipe with model, data and verifier sections.
        skip_spread_gate: train even when the gate finds no spread (recorded in ``whileai_run.json``).
        resume: continue from the newest checkpoint in the run directory.
        say: where progress lines go.
        callbacks: extra ``transformers.TrainerCallback`` objects.

    Raises:
        BadInput: a recipe that cannot run (missing sections, unknown built-ins, missing files).
        MissingExtra: torch, transformers, trl or datasets not installed.
    """
    recipe = loaded.recipe
    recipe.require("model", "data", "verifier", command="train")
    out = Path(recipe.output_dir)
    if resume and not any(out.glob("checkpoint-*")):
        raise BadInput(f"--resume: {out} has no checkpoint-* folder to continue from")
    # Under accelerate/torchrun every process runs this function; the first one gates and writes the run folder.
    main = int(os.environ.get("RANK", "0")) == 0
    summary: dict[str, Any] = {"recipe": str(loaded.path), "skip_spread_gate": skip_spread_gate, "resumed": resume}
    if main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "recipe.yaml").write_text(loaded.dump())
        # The spread gate comes before any GPU is spent and before anything heavy is imported.
        spread, passed = _spread_gate(loaded, say)
        _write_json(out / "spread_gate.json", {"spread": spread, "passed": passed})

    try:
        import datasets
        import torch
        from accelerate import PartialState
        from transformers import AutoTokenizer
        from transformers.trainer_callback import PrinterCallback, ProgressCallback
        from transformers.utils import logging as transformers_logging
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as err:
        raise MissingExtra(err.name or "trl", "train", "whileai train") from None

    transformers_logging.disable_progress_bar()
    # transformers 5 renamed gradient checkpointing; TRL 1.16 still calls the old names on every step.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")
    from whileai.graders import build_grading
    from whileai.training.distributed import TorchGather
    from whileai.training.plan import grpo_arguments
    from whileai.training.progress import RichProgress
    from whileai.training.tasks import load_task, load_verifier
    from whileai.training.tiny import build_tiny_model

    # The trainer's arguments are checked before a model is built, so a bad trainer section costs nothing.
    kwargs = grpo_arguments(loaded)
    cuda = torch.cuda.is_available()
    if cuda and importlib.util.find_spec("vllm") is not None:
        kwargs.setdefault("use_vllm", True)
        kwargs.setdefault("vllm_mode", "colocate")
    else:
        kwargs["use_vllm"] = False
        if main:
            say(f"whileai: generating with transformers ({'no vllm installed' if cuda else 'no CUDA'})")
    if not cuda:
        kwargs["use_cpu"] = True
    model = recipe.model
    assert model is not None
    if model.dtype != "auto":
        kwargs.setdefault("model_init_kwargs", {})["dtype"] = model.dtype
    kwargs.setdefault("disable_tqdm", True)
    try:
        args = GRPOConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise BadInput(f"{loaded.path}: trainer: {err}") from None

    state = PartialState()
    state.wait_for_everyone()
    gate = json.loads((out / "spread_gate.json").read_text())
    spread, passed = gate["spread"], gate["passed"]
    summary["spread"] = spread
    if not passed and not skip_spread_gate:
        summary["started"] = False
        if main:
            _write_json(out / "whileai_run.json", summary)
        return TrainingResult(out, spread, spread_failed=True)
    if not passed and main:
        say("whileai: the spread gate found no spread; training anyway (--skip-spread-gate, recorded in the run)")

    task = load_task(loaded)
    verifier = load_verifier(loaded)
    if model.tiny is not None:
        model_path = str(out / "base_model")
        if main:
            build_tiny_model(model_path, task.corpus, model.tiny, seed=recipe.trainer.seed)
        state.wait_for_everyone()
    else:
        assert model.name_or_path is not None
        model_path = model.name_or_path

    grading: GroupwiseGrading | None = build_grading(loaded) if recipe.grader is not None else None
    if grading is not None:
        reward = grading.trl_reward(
            verifier, args.num_generations, gather=TorchGather(), on_graded=GradingLog(out / "grading.jsonl")
        )
    else:
        reward = binary_reward(verifier, args.num_generations)

    tokenizer = AutoTokenizer.from_pretrained(model_path) if model.tiny is not None else None
    trainer = GRPOTrainer(
        model=model_path,
        reward_funcs=[reward],
        args=args,
        train_dataset=datasets.Dataset.from_list(task.rows),
        processing_class=tokenizer,
        environment_factory=task.environment_factory,
        callbacks=[RichProgress(say), *callbacks],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=True if resume else None)
    trainer.save_model(str(out / "final"))
    trainer.state.save_to_json(str(out / "trainer_state.json"))

    summary.update(
        started=True,
        steps=trainer.state.global_step,
        seconds=round(time.perf_counter() - started, 1),
        grader=grading.stats.as_dict() if grading is not None else None,
        grader_line=str(grading.stats) if grading is not None else None,
        scale_rewards=args.scale_rewards,
        use_vllm=args.use_vllm,
    )
    if trainer.is_world_process_zero():
        _write_json(out / "whileai_run.json", summary)
    if grading is not None and main:
        say(str(grading.stats))
    return TrainingResult(out, spread, False, trainer.state.global_step, summary.get("grader") or {})
