"""What ``whileai train`` will do with a recipe, said before anything heavy is imported (``--dry-run``).

The plan names the spread gate's rows, the grader, the verifier, the model and data, and the ``GRPOConfig``
arguments, including the settings whileai sets itself (``scale_rewards``, ``log_completions``, the generation
backend). It reads the recipe only: no torch, no TRL, no grader call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from whileai.config.load import LoadedRecipe

__all__ = ["TrainingPlan", "cpu_threads", "grpo_arguments", "training_plan"]


def grpo_arguments(loaded: LoadedRecipe) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments of a recipe, with the run directory and completion logging set.

    Completion logs are on so that one run's rollouts (``completions/*.parquet``) feed the next ``whileai spread``;
    they go to the run folder only: TRL's completion panels on the terminal (``num_completions_to_print``) are off
    unless the recipe asks for them, so the terminal shows whileai's progress and table.
    """
    recipe = loaded.recipe
    kwargs = recipe.trainer.grpo_kwargs()
    kwargs["output_dir"] = recipe.output_dir  # one run folder: the schema refuses trainer.output_dir
    kwargs.setdefault("log_completions", True)
    kwargs.setdefault("report_to", "none")
    kwargs.setdefault("num_completions_to_print", 0)
    return kwargs


def cpu_threads(model: Any) -> int | None:
    """torch's CPU threads for a run on the CPU: the recipe's ``model.threads``, else 1 for a tiny model (too small to
    gain from a second core, and far slower when another process shares it), else None (torch's default)."""
    if model.threads is not None:
        return int(model.threads)
    return 1 if model.tiny is not None else None


def _advantage_rule(loaded: LoadedRecipe) -> str:
    """What TRL will train on, in one line."""
    recipe = loaded.recipe
    if recipe.grader is not None:
        return (
            "equation 3: TRL subtracts each group's mean from the groupwise reward (scale_rewards none, one reward "
            "function of weight 1; checked on the built trainer before the first step)"
        )
    extra = recipe.trainer.model_extra or {}
    if extra.get("multi_objective_aggregation") == "normalize_then_sum":
        return "binary arm: the verifier's reward normalized per group, then by the batch's std (normalize_then_sum)"
    scaling = {
        "none": "r - mean(group), no std division (Dr. GRPO)",
        "group": "(r - mean(group)) / (std(group) + 1e-4) (GRPO)",
        "batch": "(r - mean(group)) / (std(batch) + 1e-4)",
    }[recipe.trainer.scale_rewards]
    return f"binary arm: the verifier's reward, {scaling}"


@dataclass
class TrainingPlan:
    """The steps of a run, as (step, what) pairs."""

    steps: list[tuple[str, str]] = field(default_factory=list)

    def lines(self) -> list[tuple[str, str]]:
        return list(self.steps)


def training_plan(loaded: LoadedRecipe) -> TrainingPlan:
    """Describe the run a recipe asks for."""
    recipe = loaded.recipe
    plan = TrainingPlan()
    if recipe.grader is None:
        plan.steps.append(("grader", "none: the verifier's binary reward (a comparison arm without grading)"))
        plan.steps.append(("spread gate", "skipped: no grader to check"))
    else:
        grader = recipe.grader.kind
        detail = getattr(recipe.grader, "function", None) or (
            recipe.grader.judge.model if recipe.grader.kind == "judge" else "rule"
        )
        plan.steps.append(("grader", f"{grader} ({detail}), mode {recipe.grading.mode}, cap {recipe.grading.cap}"))
        if recipe.spread.rows:
            rows = f"rows {loaded.resolve(recipe.spread.rows)}"
        elif recipe.spread.sample is not None:
            rows = (
                f"the initial model's completions: {recipe.trainer.num_generations} for each of "
                f"{recipe.spread.sample.prompts} training prompts, verified, graded before the first step"
            )
        elif recipe.simulate is not None:
            sim = recipe.simulate
            rows = f"simulated: {sim.scenarios} x {sim.n} with the {sim.agent} agent (seed {sim.seed})"
        else:
            rows = "none given: the gate is skipped and the run records it as skipped"
        if recipe.spread.controls and (recipe.spread.rows or recipe.spread.sample or recipe.simulate):
            rows += f"; controls on {recipe.spread.controls} groups (reordered, one pass copied)"
        plan.steps.append(("spread gate", rows))
    verifier = recipe.verifier
    if verifier is not None:
        plan.steps.append(("verifier", verifier.function or f"builtin:{verifier.builtin}"))
    if recipe.model is not None:
        tiny = recipe.model.tiny
        model = recipe.model.name_or_path or f"tiny random-weight model {tiny.config() if tiny else {}}"
        if recipe.model.warm_start is not None:
            warm = recipe.model.warm_start
            model += (
                f", warm-started: {warm.steps} supervised steps on {warm.rollouts} seeded-agent conversations per "
                "scenario"
            )
        plan.steps.append(("model", model))
        threads = cpu_threads(recipe.model)
        plan.steps.append(("CPU threads", "torch's default" if threads is None else str(threads)))
    if recipe.data is not None:
        plan.steps.append(("data", recipe.data.dataset))
    args = grpo_arguments(loaded)
    plan.steps.append(("advantages", _advantage_rule(loaded)))
    plan.steps.append(("GRPOConfig", ", ".join(f"{k}={v!r}" for k, v in args.items())))
    plan.steps.append(
        ("generation", "vLLM colocate when CUDA and vllm are available at run time, else transformers generate")
    )
    plan.steps.append(("run directory", str(recipe.output_dir)))
    return plan
