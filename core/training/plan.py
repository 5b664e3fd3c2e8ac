"""What ``whileai train`` will do with a run's setup, said before anything heavy is imported (``--dry-run``), and the
``GRPOConfig`` arguments the run passes.

``grpo_kwargs(setup, machine)`` is the one place where a run's setup and the machine become TRL's ``GRPOConfig``
keyword arguments, including the settings whileai sets itself (``log_completions``, the generation backend, the
CPU, the dtype): the dry run prints them and the run passes them. The plan names the spread gate's rows, the grader,
the verifier, the model and data besides. Nothing here imports TRL or calls a grader, and only ``Machine.detect``
(the run's reading of the machine) imports torch.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.config.build import TrainSetup
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


def grpo_kwargs(setup: TrainSetup, machine: Machine) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments of a run on ``machine``.

    - the trainer section, with the run directory (one run folder: the schema refuses ``trainer.output_dir``);
    - completion logs on, so that one run's rollouts (``completions/*.parquet``) feed the next ``whileai spread``;
      TRL's completion panels on the terminal (``num_completions_to_print``) and its tqdm bar off unless the recipe
      asks for them, so the terminal shows whileai's progress and table;
    - vLLM colocate on CUDA with vLLM installed (unless the recipe says otherwise), else transformers' generate, and
      ``use_cpu`` without CUDA;
    - the model's ``dtype``, when the recipe sets one.
    """
    kwargs = setup.trainer.grpo_kwargs()
    kwargs["output_dir"] = str(setup.output_dir)
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
    model = setup.model
    if model.dtype != "auto":
        kwargs["model_init_kwargs"] = {**(kwargs.get("model_init_kwargs") or {}), "dtype": model.dtype}
    return kwargs


def cpu_threads(model: Any) -> int | None:
    """torch's CPU threads for a run on the CPU: the recipe's ``model.threads``, else 1 for a tiny model (too small to
    gain from a second core, and far slower when another process shares it), else None (torch's default)."""
    if model.threads is not None:
        return int(model.threads)
    return 1 if model.tiny is not None else None


def _advantage_rule(setup: TrainSetup) -> str:
    """What TRL will train on, in one line."""
    if setup.grader is not None:
        return (
            "equation 3: TRL subtracts each group's mean from the groupwise reward (scale_rewards none, one reward "
            "function of weight 1; checked on the built trainer before the first step)"
        )
    extra = setup.trainer.model_extra or {}
    if extra.get("multi_objective_aggregation") == "normalize_then_sum":
        return "binary arm: the verifier's reward normalized per group, then by the batch's std (normalize_then_sum)"
    scaling = {
        "none": "r - mean(group), no std division (Dr. GRPO)",
        "group": "(r - mean(group)) / (std(group) + 1e-4) (GRPO)",
        "batch": "(r - mean(group)) / (std(batch) + 1e-4)",
    }[setup.trainer.scale_rewards]
    return f"binary arm: the verifier's reward, {scaling}"


@dataclass
class TrainingPlan:
    """The run a setup would train, as ``whileai train --dry-run`` prints it: the resolved recipe, then the steps as
    (step, what) pairs."""

    shown: str
    steps: list[tuple[str, str]] = field(default_factory=list)


def training_plan(setup: TrainSetup) -> TrainingPlan:
    """The run ``setup`` would train on this machine (read without torch: ``Machine.without_torch``)."""
    plan = TrainingPlan(setup.shown)
    if setup.grader is None:
        plan.steps.append(("grader", "none: the verifier's binary reward (a comparison arm without grading)"))
        plan.steps.append(("spread gate", "skipped: no grader to check"))
    else:
        grader = setup.grader
        detail = getattr(grader, "function", None) or (grader.judge.model if grader.kind == "judge" else "rule")
        plan.steps.append(("grader", f"{grader.kind} ({detail}), mode {setup.knobs.mode}, cap {setup.knobs.cap}"))
        plan.steps.append(("spread gate", _gate_rows(setup)))
        plan.steps.append(("spread watch", _watch_line(setup)))
    verifier = setup.verifier
    plan.steps.append(("verifier", verifier.function or f"builtin:{verifier.builtin}"))
    plan.steps.append(("model", _model_line(setup.model)))
    threads = cpu_threads(setup.model)
    plan.steps.append(("CPU threads", "torch's default" if threads is None else str(threads)))
    plan.steps.append(("data", setup.data.dataset))
    machine = Machine.without_torch()
    args = grpo_kwargs(setup, machine)
    plan.steps.append(("advantages", _advantage_rule(setup)))
    plan.steps.append(("GRPOConfig", ", ".join(f"{k}={v!r}" for k, v in args.items())))
    plan.steps.append(("generation", f"{machine.generation(args)} on this machine (whileai train asks torch again)"))
    plan.steps.append(("run directory", str(setup.output_dir)))
    return plan


def _gate_rows(setup: TrainSetup) -> str:
    """What the spread gate reads, in one line."""
    spread, sim = setup.spread, setup.simulate
    if spread.rows:
        rows = f"rows {setup.resolve(spread.rows)}"
    elif spread.sample is not None:
        rows = (
            f"the initial model's completions: {setup.trainer.num_generations} for each of "
            f"{spread.sample.prompts} training prompts, verified, graded before the first step"
        )
    elif sim is not None:
        rows = f"simulated: {sim.scenarios} x {sim.n} with the seeded agent (seed {sim.seed})"
    else:
        rows = "none given: the gate is skipped and the run records it as skipped"
    if spread.controls and (spread.rows or spread.sample or sim):
        rows += f"; controls on {spread.controls} groups (reordered, one pass copied)"
    return rows


def _watch_line(setup: TrainSetup) -> str:
    """The spread watch's checks, in one line."""
    watch = setup.spread.watch
    if not watch.enabled:
        return "off (spread.watch.enabled: false)"
    steps = (setup.trainer.model_extra or {}).get("max_steps")
    never = isinstance(steps, int) and 0 < steps < watch.every_steps
    return (
        f"every {watch.every_steps} steps on the last {watch.window} steps' groups, up to {watch.controls} controls "
        f"a check while their calls stay within {watch.max_extra_calls:.0%} of the grader's; on_fail {watch.on_fail}"
        + (f" after {watch.patience} in a row" if watch.on_fail == "stop" else "")
        + (f"; no check will run: max_steps {steps} < every_steps" if never else "")
    )


def _model_line(model: Any) -> str:
    """The policy, in one line: where it comes from, its warm start, tool-call form and adapters."""
    name = model.name_or_path
    line = f"{name}, from {model_source(name)}" if name else f"tiny random-weight model {model.tiny.config()}"
    if model.warm_start is not None:
        warm = model.warm_start
        line += (
            f", warm-started: {warm.steps} supervised steps on {warm.rollouts} seeded-agent conversations per scenario"
        )
    if model.tool_calls == "json":
        line += "; tool calls in the chat template's form or as bare JSON"
    if model.lora is not None:
        lora = model.lora
        line += f"; LoRA adapters (rank {lora.r}, alpha {lora.alpha:g}, on {lora.target_modules}), the rest frozen"
    return line


def model_path(setup: TrainSetup) -> str:
    """Where the policy loads from: the tiny model's folder in the run, or the recipe's model. A local folder is
    made absolute: LoRA adapters record the path of the model they sit on, and are loaded from other folders."""
    model = setup.model
    path = str(setup.output_dir / "base_model") if model.tiny is not None else model.name_or_path
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
    # TRL warns of each batch with a completion no reward function scored, quoting the model's text raw (whatever it
    # makes a terminal do); whileai counts those itself and says them in the run's closing line and record.
    logging.getLogger("trl.trainer.grpo_trainer").addFilter(_not_trl_s_unscored_warning)


def _not_trl_s_unscored_warning(record: logging.LogRecord) -> bool:
    return "All reward functions returned None" not in str(record.msg)
