"""What ``whileai train`` will do with a recipe, said before anything heavy is imported (``--dry-run``), and the
``GRPOConfig`` arguments the run passes.

``grpo_kwargs(loaded, machine)`` is the one place where a recipe and the machine become TRL's ``GRPOConfig``
keyword arguments, including the settings whileai sets itself (``log_completions``, the generation backend, the
CPU, the dtype): the dry run prints them and the run passes them. The plan names the spread gate's rows, the grader,
the verifier, the model and data besides. Nothing here imports TRL or calls a grader, and only ``Machine.detect``
(the run's reading of the machine) imports torch.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.config.load import LoadedRecipe
from whileai.config.machine import model_source
from whileai.errors import needs_extra

__all__ = ["Machine", "TrainingPlan", "cpu_threads", "grpo_kwargs", "model_path", "quiet_libraries", "training_plan"]


@dataclass(frozen=True)
class Machine:
    """What a run's arguments depend on besides the recipe: a CUDA device torch can use, and vLLM installed."""

    cuda: bool
    vllm: bool

    @classmethod
    def detect(cls) -> Machine:
        """This machine, as torch sees it (imports torch)."""
        import torch

        return cls(torch.cuda.is_available(), importlib.util.find_spec("vllm") is not None)

    @classmethod
    def without_torch(cls) -> Machine:
        """This machine, read without importing torch (the dry run): an NVIDIA driver loaded, torch and vLLM
        installed. A CPU build of torch on a GPU machine reads as CUDA here; ``detect`` knows better."""
        driver = Path("/proc/driver/nvidia/version").is_file()
        torch = importlib.util.find_spec("torch") is not None
        return cls(driver and torch, importlib.util.find_spec("vllm") is not None)

    def generation(self, kwargs: dict[str, Any]) -> str:
        """What generates the completions with these ``GRPOConfig`` arguments, and why."""
        if kwargs.get("use_vllm"):
            return f"vLLM ({kwargs.get('vllm_mode', 'server')})"
        if self.cuda and self.vllm:
            return "transformers (trainer.use_vllm: false)"
        return f"transformers ({'no vllm installed' if self.cuda else 'no CUDA'})"


def grpo_kwargs(loaded: LoadedRecipe, machine: Machine) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments of a recipe on ``machine``.

    - the trainer section, with the run directory (one run folder: the schema refuses ``trainer.output_dir``);
    - completion logs on, so that one run's rollouts (``completions/*.parquet``) feed the next ``whileai spread``;
      TRL's completion panels on the terminal (``num_completions_to_print``) and its tqdm bar off unless the recipe
      asks for them, so the terminal shows whileai's progress and table;
    - vLLM colocate on CUDA with vLLM installed (unless the recipe says otherwise), else transformers' generate, and
      ``use_cpu`` without CUDA;
    - the model's ``dtype``, when the recipe sets one.
    """
    recipe = loaded.recipe
    kwargs = recipe.trainer.grpo_kwargs()
    kwargs["output_dir"] = recipe.output_dir
    kwargs.setdefault("log_completions", True)
    kwargs.setdefault("report_to", "none")
    kwargs.setdefault("num_completions_to_print", 0)
    kwargs.setdefault("disable_tqdm", True)
    if machine.cuda and machine.vllm:
        kwargs.setdefault("use_vllm", True)
        kwargs.setdefault("vllm_mode", "colocate")
    else:
        kwargs["use_vllm"] = False
    if not machine.cuda:
        kwargs["use_cpu"] = True
    model = recipe.model
    if model is not None and model.dtype != "auto":
        kwargs["model_init_kwargs"] = {**(kwargs.get("model_init_kwargs") or {}), "dtype": model.dtype}
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
    """Describe the run a recipe asks for on this machine (read without torch: ``Machine.without_torch``)."""
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
            rows = f"simulated: {sim.scenarios} x {sim.n} with the seeded agent (seed {sim.seed})"
        else:
            rows = "none given: the gate is skipped and the run records it as skipped"
        if recipe.spread.controls and (recipe.spread.rows or recipe.spread.sample or recipe.simulate):
            rows += f"; controls on {recipe.spread.controls} groups (reordered, one pass copied)"
        plan.steps.append(("spread gate", rows))
        watch = recipe.spread.watch
        if watch.enabled:
            steps = (recipe.trainer.model_extra or {}).get("max_steps")
            never = isinstance(steps, int) and 0 < steps < watch.every_steps
            plan.steps.append(
                (
                    "spread watch",
                    f"every {watch.every_steps} steps on the last {watch.window} steps' groups, up to "
                    f"{watch.controls} controls a check while their calls stay within {watch.max_extra_calls:.0%} of "
                    f"the grader's; on_fail {watch.on_fail}"
                    + (f" after {watch.patience} in a row" if watch.on_fail == "stop" else "")
                    + (f"; no check will run: max_steps {steps} < every_steps" if never else ""),
                )
            )
        else:
            plan.steps.append(("spread watch", "off (spread.watch.enabled: false)"))
    verifier = recipe.verifier
    if verifier is not None:
        plan.steps.append(("verifier", verifier.function or f"builtin:{verifier.builtin}"))
    if recipe.model is not None:
        tiny = recipe.model.tiny
        name = recipe.model.name_or_path
        model = (
            f"{name}, from {model_source(name)}"
            if name
            else f"tiny random-weight model {tiny.config() if tiny else {}}"
        )
        if recipe.model.warm_start is not None:
            warm = recipe.model.warm_start
            model += (
                f", warm-started: {warm.steps} supervised steps on {warm.rollouts} seeded-agent conversations per "
                "scenario"
            )
        if recipe.model.tool_calls == "json":
            model += "; tool calls in the chat template's form or as bare JSON"
        lora = recipe.model.lora
        if lora is not None:
            model += f"; LoRA adapters (rank {lora.r}, alpha {lora.alpha:g}, on {lora.target_modules}), the rest frozen"
        plan.steps.append(("model", model))
        threads = cpu_threads(recipe.model)
        plan.steps.append(("CPU threads", "torch's default" if threads is None else str(threads)))
    if recipe.data is not None:
        plan.steps.append(("data", recipe.data.dataset))
    machine = Machine.without_torch()
    args = grpo_kwargs(loaded, machine)
    plan.steps.append(("advantages", _advantage_rule(loaded)))
    plan.steps.append(("GRPOConfig", ", ".join(f"{k}={v!r}" for k, v in args.items())))
    plan.steps.append(("generation", f"{machine.generation(args)} on this machine (whileai train asks torch again)"))
    plan.steps.append(("run directory", str(recipe.output_dir)))
    return plan


def model_path(loaded: LoadedRecipe) -> str:
    """Where the policy loads from: the tiny model's folder in the run, or the recipe's model. A local folder is
    made absolute: LoRA adapters record the path of the model they sit on, and are loaded from other folders."""
    model = loaded.recipe.model
    assert model is not None
    path = str(Path(loaded.recipe.output_dir) / "base_model") if model.tiny is not None else model.name_or_path
    assert path is not None
    return str(Path(path).resolve()) if model.tiny is not None or Path(path).is_dir() else path


def quiet_libraries(command: str = "whileai train") -> None:
    """Import the trainer's libraries (naming the extra when one is missing, for ``command``) and silence what a
    recipe user cannot act on."""
    with needs_extra("train", command):
        import datasets  # noqa: F401
        import torch  # noqa: F401
        import trl  # noqa: F401
        from transformers.utils import logging as transformers_logging
    transformers_logging.disable_progress_bar()
    # whileai chose TRL's environment_factory for its multi-turn tasks; its "experimental feature" notice is TRL's to
    # give to TRL's users.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # transformers 5 renamed gradient checkpointing; TRL 1.16 still calls the old names on every step.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")
