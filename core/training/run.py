"""``whileai train``: the spread gate, then TRL's ``GRPOTrainer`` with the groupwise grader, writing a run you can read.

``run_training`` refuses a folder that holds a run unless told to resume, and marks how a run that stops ended.
``_train`` reads top to bottom:

1. the run folder: a resume drops what the steps it replays logged; the resolved recipe is written;
2. on one process, the spread gate on the recipe's rows or simulated rollouts, before anything heavy is imported;
3. ``GRPOConfig`` from the recipe's trainer section (vLLM colocate on CUDA when vLLM is installed), checked before a
   model is built;
4. on the first process, while the others wait: the gate (where it has not run, or on the initial model's own
   completions with ``spread.sample``) and the tiny random-weight model (saved first: TRL and vLLM load models by
   name); a refusal stops here unless told to skip, and is recorded either way;
5. the reward function (``grading.trl_reward(verifier, num_generations)``, or the verifier alone for a binary arm),
   logging each graded group to ``grading.jsonl``, and TRL's trainer (``whileai.integrations.trl.grpo_trainer``);
6. train, save the final model and ``whileai_run.json``.

The run folder's files and how a run continues in it: ``whileai.training.folder``. torch, transformers, trl and
datasets are imported inside ``run_training``, never by importing this module.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.config.load import LoadedRecipe
from whileai.errors import BadInput, MissingExtra
from whileai.grading.groupwise import GradedGroup, GroupwiseGrading
from whileai.integrations.trl import binary_reward
from whileai.training.folder import (
    GradingLog,
    forget_after,
    last_checkpoint,
    mark_run,
    recorded_gate,
    training_output,
    write_json,
)

__all__ = ["Gate", "TrainingResult", "binary_reward", "gate_source", "run_training"]


@dataclass
class TrainingResult:
    """How a run ended."""

    output_dir: Path
    spread: dict[str, Any] | None
    spread_failed: bool = False
    steps: int = 0
    grader: dict[str, Any] = field(default_factory=dict)
    spread_verdict: str | None = None


@dataclass
class Gate:
    """The spread gate's outcome, as ``spread_gate.json`` keeps it.

    Attributes:
        source: where its rows came from: ``"rows"`` (spread.rows), ``"sample"`` (the initial model's completions),
            ``"simulate"`` (the seeded agent), or None when it was skipped.
        verdict: the report's (``"yes"``, ``"no"``, ``"too few"``, ``"broken"``) or ``"skipped"``.
        report: the spread report as JSON, when the gate ran.
        reason: why it was skipped.
    """

    source: str | None
    verdict: str
    report: dict[str, Any] | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "verdict": self.verdict,
            "passed": None if self.verdict == "skipped" else self.verdict == "yes",
            "skipped": self.reason,
            "spread": self.report,
        }


def gate_source(loaded: LoadedRecipe) -> str | None:
    """Where the spread gate's rows come from: spread.rows, then spread.sample, then the simulate section."""
    recipe = loaded.recipe
    if recipe.spread.rows:
        return "rows"
    if recipe.spread.sample is not None:
        return "sample"
    if recipe.simulate is not None:
        return "simulate"
    return None


def _run_gate(
    loaded: LoadedRecipe, say: Callable[[str], None], sampled: list[tuple[str, list[Any]]] | None = None
) -> dict[str, Any]:
    """Run the spread gate of the recipe (``sampled``: the groups the initial model wrote, for ``spread.sample``),
    say its verdict and keep it in the run folder's ``spread_gate.json``; returns what that file holds."""
    gate = _spread_gate(loaded, say, sampled).as_dict()
    write_json(Path(loaded.recipe.output_dir) / "spread_gate.json", gate)
    return gate


def _spread_gate(loaded: LoadedRecipe, say: Callable[[str], None], sampled: list[tuple[str, list[Any]]] | None) -> Gate:
    from whileai.grading.build import build_grading
    from whileai.grading.gate import check_spread_file, check_spread_groups
    from whileai.rows import RowFields

    recipe = loaded.recipe
    source = gate_source(loaded)
    if recipe.grader is None or source is None:
        if recipe.grader is None:
            reason = "no grader: a binary arm"
        else:
            reason = "no spread.rows, spread.sample or simulate section"
        say(f"whileai: spread gate skipped: {reason}")
        return Gate(None, "skipped", reason=reason)
    grading = build_grading(loaded)
    if recipe.grader.kind == "judge":
        from whileai.judge.grader import judge_plan

        if (plan := judge_plan(grading.grader)) is not None:
            say(f"whileai: {plan}")
    settings = recipe.spread
    if source == "rows":
        assert settings.rows is not None
        fields = RowFields(settings.group_key, settings.reward_key, settings.text_key, settings.prompt_key)
        path = loaded.resolve(settings.rows)
        report = check_spread_file(
            path, grading, fields, skip_bad=settings.skip_bad_rows, controls=settings.controls, seed=settings.seed
        ).report
    elif source == "sample":
        assert sampled is not None
        report = check_spread_groups(grading, sampled, strict=False, controls=settings.controls, seed=settings.seed)
    else:
        from whileai.simulations.agents import seeded_agent
        from whileai.simulations.scenarios import load_scenarios
        from whileai.simulations.simulate import simulate

        sim = recipe.simulate
        assert sim is not None
        scenarios = load_scenarios(sim.scenarios, n=sim.num_scenarios, seed=sim.seed)
        rows = simulate(scenarios, seeded_agent(seed=sim.seed), n=sim.n, seed=sim.seed)
        report = grading.check_spread(rows, strict=False, controls=settings.controls, seed=settings.seed)
    say(f"whileai: spread gate on {_SOURCES[source]}:")
    say(str(report))
    return Gate(source, report.verdict, report.as_dict())


_SOURCES = {
    "rows": "the recipe's spread.rows",
    "sample": "completions of the initial model",
    "simulate": "the seeded agent's simulated rollouts",
}


def _build_tiny(path: str, model: Any, task: Any, seed: int, say: Callable[[str], None]) -> None:
    """Build the recipe's tiny random-weight model: word-level for a text task, a warm-started tool caller for a
    multi-turn one."""
    from whileai.training.tiny import WarmStart, build_tiny_agent_model, build_tiny_model

    if task.environment_factory is None:
        build_tiny_model(path, task.corpus, model.tiny.config(), seed=seed)
        return
    from whileai.simulations.environment import environment_tools

    warm = model.warm_start
    started = time.perf_counter()
    # Without a warm start the demonstrations still train the tokenizer (two per scenario are plenty for that).
    conversations = task.demonstrations(warm.rollouts if warm is not None else 2, seed)
    tools = environment_tools(task.environment_factory())
    plan = None if warm is None else WarmStart(warm.steps, warm.batch_size, warm.learning_rate)
    build_tiny_agent_model(path, conversations, tools, model.tiny.config(), plan, seed=seed)
    if plan is not None and plan.steps > 0:
        record = json.loads((Path(path) / "warm_start.json").read_text())
        say(
            f"whileai: warm start: {warm.steps} supervised steps on {len(conversations)} seeded-agent conversations, "
            f"final loss {record['final_loss']} ({time.perf_counter() - started:.0f} s)"
        )


def _refused(gate: dict[str, Any], skip_spread_gate: bool) -> bool:
    """Whether the gate's verdict stops the run before training."""
    return gate["verdict"] not in ("yes", "skipped") and not skip_spread_gate


def first_process() -> bool:
    """Whether this is the first process of a launch (``RANK`` 0 under accelerate or torchrun), or the only one."""
    return int(os.environ.get("RANK", "0")) == 0


def _end_process_group() -> None:
    """Destroy the torch.distributed process group of a multi-process run once every process has finished it.

    Under ``accelerate launch`` the accelerate state that ``GRPOConfig`` builds joins the processes (gloo on a CPU)
    and nothing ends that group: neither ``Trainer.train`` nor ``GRPOTrainer`` does, and TRL's own scripts call
    ``trainer.end()`` after saving for this. A gloo group left alive at interpreter exit can end a process that has
    finished its work in std::terminate ("terminate called without an active exception", SIGABRT). The barrier comes
    first so that no process closes its connections while another still waits on them. A run that raised does not
    come here: its peers may never reach the barrier, and the launcher ends them. With one process (no group, or
    torch never imported) this does nothing.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    dist.barrier()
    dist.destroy_process_group()


def run_training(
    loaded: LoadedRecipe,
    *,
    skip_spread_gate: bool = False,
    resume: bool = False,
    say: Callable[[str], None] = print,
    callbacks: Sequence[Any] = (),
) -> TrainingResult:
    """Run the recipe: the spread gate, then GRPO with the groupwise grader.

    A run that stops on an error or on Ctrl-C is marked in ``whileai_run.json`` (``status``: ``failed`` with the
    error, or ``interrupted`` with the newest checkpoint), so a half-made folder never reads as a finished run. A run
    that returns (trained, or refused by the spread gate) ends with the process group of a multi-process launch
    destroyed on every process: it is the process's last distributed work.

    Args:
        loaded: a validated recipe with model, data and verifier sections.
        skip_spread_gate: train even when the gate finds no spread (recorded in ``whileai_run.json``).
        resume: continue from the newest checkpoint in the run directory.
        say: where progress lines go.
        callbacks: extra ``transformers.TrainerCallback`` objects.

    Raises:
        BadInput: a recipe that cannot run (missing sections, unknown built-ins, missing files).
        MissingExtra: torch, transformers, trl or datasets not installed.
        KeyboardInterrupt: Ctrl-C, after the run folder was marked.
    """
    out = Path(loaded.recipe.output_dir)
    # Refused before anything is written, so the folder's own record stays as it was.
    used = training_output(out)
    if used and not resume:
        raise BadInput(
            f"{out} holds a run already ({', '.join(used)}): continue it with --resume, or train into another "
            f"folder with output_dir=NEW (or remove {out})"
        )
    if resume and not used and not (out / "recipe.yaml").is_file():
        raise BadInput(f"--resume: {out} has no checkpoint-* folder and no run to start over; train without --resume")
    try:
        result = _train(loaded, skip_spread_gate, resume, say, callbacks)
    except KeyboardInterrupt:
        if first_process():
            checkpoint = last_checkpoint(out)
            mark_run(out, "interrupted", last_checkpoint=None if checkpoint is None else checkpoint[0].name)
        raise
    except Exception as error:
        if first_process():
            mark_run(out, "failed", error=f"{type(error).__name__}: {error}")
        raise
    # Outside the try: the run's folder already says how it ended, and a peer lost here does not undo that.
    _end_process_group()
    return result


def _train(
    loaded: LoadedRecipe,
    skip_spread_gate: bool,
    resume: bool,
    say: Callable[[str], None],
    callbacks: Sequence[Any],
) -> TrainingResult:
    recipe = loaded.recipe
    recipe.require("model", "data", "verifier", command="train")
    model = recipe.model
    assert model is not None
    out = Path(recipe.output_dir)
    # Under accelerate/torchrun every process runs this function; the first one gates and writes the run folder.
    main = first_process()

    # 1. The folder: a resume drops what the steps it replays logged, and keeps what came before for the figures.
    checkpoint = last_checkpoint(out) if resume else None
    graded_before: list[dict[str, Any]] = []
    if resume and main:
        if checkpoint is None:
            say(f"whileai: {out} has no checkpoint yet: starting its run over from the first step")
        else:
            say(f"whileai: resuming from {checkpoint[0].name}")
        graded_before = forget_after(out, 0 if checkpoint is None else checkpoint[1], say)
    summary: dict[str, Any] = {
        "recipe": str(loaded.path),
        "skip_spread_gate": skip_spread_gate,
        "resumed": resume,
        "resumed_from": None if checkpoint is None else checkpoint[0].name,
    }

    # 2. On one process, the spread gate comes before anything heavy is imported (a refusal costs nothing); on the
    # initial model's own completions (spread.sample) it comes once that model exists, still before the first step;
    # with several processes it runs on the first once they are joined, the others waiting for its verdict.
    sampled_gate = recipe.grader is not None and gate_source(loaded) == "sample"
    gate: dict[str, Any] | None = None
    if main:
        # A resume keeps the verdict the run was gated on, unless what the gate reads has changed since.
        if resume:
            gate, why = recorded_gate(out, loaded.recipe.model_dump(mode="json"))
            if gate is None:
                say(f"whileai: the spread gate runs again: {why}")
            else:
                say(f"whileai: the spread gate's verdict from {out / 'spread_gate.json'}: {gate['verdict']}")
        out.mkdir(parents=True, exist_ok=True)
        (out / "recipe.yaml").write_text(loaded.dump())
        if gate is None and not sampled_gate and int(os.environ.get("WORLD_SIZE") or 1) == 1:
            gate = _run_gate(loaded, say)

    # 3. TRL's arguments, checked before a model is built (a bad trainer section costs nothing).
    _quiet_libraries()
    from accelerate import PartialState

    from whileai.grading.build import build_grading
    from whileai.integrations.trl import grpo_trainer
    from whileai.training.distributed import TorchGather, on_first_process
    from whileai.training.progress import RichProgress
    from whileai.training.tasks import load_task, load_verifier

    args = _grpo_config(loaded, main, say)
    state = PartialState()
    task = load_task(loaded)
    verifier = load_verifier(loaded)
    model_path = str(out / "base_model") if model.tiny is not None else model.name_or_path
    assert model_path is not None

    # 4. The gate (where it has not run) and the tiny model, on the first process, in the order that spends least
    # on a refusal.
    def prepare() -> dict[str, Any]:
        verdict = gate if gate is not None or sampled_gate else _run_gate(loaded, say)
        if verdict is not None and _refused(verdict, skip_spread_gate):
            return verdict
        # A resume finds the tiny model it started from (saved model first, tokenizer last) and does not build it
        # again: the checkpoint holds the weights training has reached.
        if model.tiny is not None and not (resume and (Path(model_path) / "tokenizer_config.json").is_file()):
            _build_tiny(model_path, model, task, recipe.trainer.seed, say)
        if verdict is None:
            from whileai.training.sample import sample_groups

            sample = recipe.spread.sample
            assert sample is not None
            prompts = [task.rows[i % len(task.rows)] for i in range(sample.prompts)]  # a short dataset is reused
            verdict = _run_gate(loaded, say, sample_groups(model_path, prompts, verifier, args, seed=sample.seed))
        assert verdict is not None
        return verdict

    gate = on_first_process(prepare, state.num_processes, say)
    summary["spread"] = gate
    if _refused(gate, skip_spread_gate):
        summary.update(started=False, status="refused by the spread gate")
        if main:
            write_json(out / "whileai_run.json", summary)
        return TrainingResult(out, gate["spread"], spread_failed=True, spread_verdict=gate["verdict"])
    if gate["verdict"] not in ("yes", "skipped") and main:
        say("whileai: the spread gate did not pass; training anyway (--skip-spread-gate, recorded in the run)")

    # 5. The reward function (the grader's, or the verifier's alone for a binary arm) and TRL's trainer.
    grading: GroupwiseGrading | None = build_grading(loaded) if recipe.grader is not None else None
    if grading is not None:
        # The run's figures cover the whole run: the groups graded before the checkpoint count too.
        grading.stats.record_groups([GradedGroup.from_dict(g) for g in graded_before], grading.hack_zero)
        log = GradingLog(out / "grading.jsonl")
        reward = grading.trl_reward(verifier, args.num_generations, gather=TorchGather(), on_graded=log)
    else:
        reward = binary_reward(verifier, args.num_generations, gather=TorchGather())
    tokenizer = None
    if model.tiny is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
    trainer = grpo_trainer(
        model=model_path,
        reward=reward,
        args=args,
        train_rows=task.rows,
        eval_rows=task.eval_rows,
        processing_class=tokenizer,
        environment_factory=task.environment_factory,
        callbacks=[RichProgress(say), *callbacks],
        grader_arm=grading is not None,
        where=str(loaded.path),
        say=say if main else None,
    )

    # 6. Train, save, and say how it went.
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint[0]))
    trainer.save_model(str(out / "final"))
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    summary.update(
        status="finished",
        started=True,
        steps=trainer.state.global_step,
        seconds=round(time.perf_counter() - started, 1),
        grader=grading.figures() if grading is not None else None,
        grader_line=str(grading.stats) if grading is not None else None,
        scale_rewards=args.scale_rewards,
        use_vllm=args.use_vllm,
        world_size=state.num_processes,  # the processes that trained; rank 0 graded every group for all of them
    )
    if trainer.is_world_process_zero():
        write_json(out / "whileai_run.json", summary)
    if grading is not None and main:
        say(str(grading.stats))
    return TrainingResult(
        out, gate["spread"], False, trainer.state.global_step, summary.get("grader") or {}, gate["verdict"]
    )


def _quiet_libraries() -> None:
    """Import the trainer's libraries (naming the extra when one is missing) and silence what a recipe user cannot
    act on."""
    try:
        import datasets  # noqa: F401
        import torch  # noqa: F401
        import trl  # noqa: F401
        from transformers.utils import logging as transformers_logging
    except ImportError as err:
        raise MissingExtra(err.name or "trl", "train", "whileai train") from None
    transformers_logging.disable_progress_bar()
    # whileai chose TRL's environment_factory for its multi-turn tasks; its "experimental feature" notice is TRL's to
    # give to TRL's users.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # transformers 5 renamed gradient checkpointing; TRL 1.16 still calls the old names on every step.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")


def _grpo_config(loaded: LoadedRecipe, main: bool, say: Callable[[str], None]) -> Any:
    """TRL's ``GRPOConfig`` of the recipe, with vLLM colocate on CUDA when vLLM is installed and torch's CPU threads
    set on a CPU."""
    import torch
    from trl import GRPOConfig

    from whileai.training.plan import cpu_threads, grpo_arguments

    model = loaded.recipe.model
    assert model is not None
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
        threads = cpu_threads(model)
        if threads is not None:
            torch.set_num_threads(threads)
    if model.dtype != "auto":
        kwargs.setdefault("model_init_kwargs", {})["dtype"] = model.dtype
    kwargs.setdefault("disable_tqdm", True)
    try:
        return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise BadInput(f"{loaded.path}: trainer: {err}") from None
