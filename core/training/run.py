"""``whileai train``: the spread gate, then TRL's ``GRPOTrainer`` with the groupwise grader, writing a run you can read.

``run_training`` refuses a folder that holds a run unless told to resume, and marks how a run that stops ended.
A run takes its setup (``whileai.config.build.TrainSetup``), never the recipe. ``_train`` reads top to bottom:

1. the run folder: a resume drops what the steps it replays logged; the resolved recipe is written; the run's one
   ``GroupwiseGrading`` is built (the gate checks the grader that trains: one judge client, one plan line);
2. on one process, the spread gate on the recipe's rows or simulated rollouts, before anything heavy is imported;
3. ``GRPOConfig`` from ``whileai.training.plan.grpo_kwargs`` (what ``--dry-run`` prints), checked before a model is
   built;
4. on the first process, while the others wait: the gate (where it has not run, or on the initial model's own
   completions with ``spread.sample``) and the tiny random-weight model (saved first: TRL and vLLM load models by
   name); a refusal stops here unless told to skip, and is recorded either way;
5. the reward function (``grading.trl_reward(verifier, num_generations)``, or the verifier alone for a binary arm),
   logging each graded group to ``grading.jsonl``, and TRL's trainer
   (``whileai.integrations.trl_trainer.grpo_trainer``);
6. train, save the final model and ``whileai_run.json``.

The run folder's files and how a run continues in it: ``whileai.training.folder``. torch, transformers, trl and
datasets are imported inside ``run_training``, never by importing this module.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.config.build import TrainSetup
from whileai.config.machine import check_hub
from whileai.errors import BadInput, GraderUnavailable, describe
from whileai.grading.gate import unavailable_report
from whileai.grading.groupwise import GradedGroup, GroupwiseGrading
from whileai.grading.tally import mostly_fell_back
from whileai.grading.trl import binary_reward, generations_per_step
from whileai.tasks.load import check_verifier, task_and_verifier
from whileai.training.folder import (
    GradingLog,
    arm_changes,
    begin_record,
    finished_steps,
    forget_after,
    last_checkpoint,
    mark_run,
    rebuild_record,
    recorded_gate,
    refused_write,
    run_lock,
    training_output,
    write_json,
    write_whole,
)
from whileai.training.plan import TrainingPlan, model_path, quiet_libraries, training_plan

__all__ = ["RunInterrupted", "TrainingResult", "binary_reward", "dry_run", "run_training"]


@dataclass
class TrainingResult:
    """How a run ended."""

    output_dir: Path
    spread: dict[str, Any] | None
    spread_failed: bool = False
    steps: int = 0
    grader: dict[str, Any] = field(default_factory=dict)
    spread_verdict: str | None = None
    finished: tuple[int, int] | None = None  # a resume of a finished run: (steps trained, steps it was to train)
    watch_stopped: dict[str, Any] | None = None  # the spread watch ended training: its step and why
    verifier_stopped: dict[str, Any] | None = None  # the verifier scored nothing for a few batches: its step and why
    verifier: dict[str, Any] | None = None  # the verifier's failures and unscored completions, when it had any
    verifier_trace: str = ""  # the latest failure's traceback (whileai --debug)
    plain: str = ""  # how the run trained when most of its graded groups fell back (mostly_fell_back), else empty


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run, raised once the run folder says so: ``checkpoint`` is the newest one, (folder,
    step), or None before the first; ``exit_code`` and ``said`` those of the interruption (130 and Ctrl-C, or
    ``whileai.errors.Terminated``'s)."""

    def __init__(self, checkpoint: tuple[Path, int] | None, stop: KeyboardInterrupt | None = None) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.exit_code: int = getattr(stop, "exit_code", 130)
        self.said: str = getattr(stop, "said", "Ctrl-C")


def _gate_record(
    source: str | None,
    verdict: str,
    report: dict[str, Any] | None = None,
    reason: str | None = None,
    sampled: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The spread gate's outcome, as ``spread_gate.json`` keeps it: where its rows came from (``source``: ``"rows"``,
    ``"sample"`` the initial model's completions, ``"simulate"`` the seeded agent, None when skipped), the report's
    ``verdict`` (``"yes"``, ``"no"``, ``"too few"``, ``"broken"``) or ``"skipped"`` with its ``reason``, the report as
    JSON, and with ``spread.sample`` the initial model's pass rate (``whileai.training.sample.sampled_pass_rate``)."""
    return {
        "source": source,
        "verdict": verdict,
        "passed": None if verdict == "skipped" else verdict == "yes",
        "skipped": reason,
        "spread": report,
        "sampled_pass_rate": sampled,
    }


def _run_gate(
    setup: TrainSetup,
    grading: GroupwiseGrading | None,
    say: Callable[[str], None],
    sampled: list[tuple[str, list[Any]]] | None = None,
) -> dict[str, Any]:
    """Run the spread gate of the recipe (``sampled``: the groups the initial model wrote, for ``spread.sample``),
    say its verdict and keep it in the run folder's ``spread_gate.json``; returns what that file holds. The gate's
    groups and calls are not the run's: ``grading``'s counters, and its judge's, are as they were before it."""
    before = grading.counters() if grading is not None else None
    try:
        gate = _spread_gate(setup, grading, say, sampled)
    finally:
        if grading is not None and before is not None:
            grading.restore_counters(before)
    write_json(setup.output_dir / "spread_gate.json", gate)
    return gate


def _spread_gate(
    setup: TrainSetup,
    grading: GroupwiseGrading | None,
    say: Callable[[str], None],
    sampled: list[tuple[str, list[Any]]] | None,
) -> dict[str, Any]:
    """The gate's report on the recipe's rows, the initial model's sampled groups or the seeded agent's rollouts."""
    from whileai.grading.gate import check_spread_file, check_spread_groups

    source, settings, sampled_rate = setup.gate_source, setup.spread, None
    if grading is None or source is None:
        reason = "no grader: a binary arm" if grading is None else "no spread.rows, spread.sample or simulate section"
        say(f"whileai: spread gate skipped: {reason}")
        return _gate_record(None, "skipped", reason=reason)
    checks = {"controls": settings.controls, "seed": settings.seed}
    heading = f"whileai: spread gate on {_SOURCES[source]}:"
    try:
        if source == "rows":
            assert settings.rows is not None
            path, fields = setup.resolve(settings.rows), settings.row_fields()
            spread = check_spread_file(path, grading, fields, skip_bad=settings.skip_bad_rows, **checks)
            if spread.rows.read_as:
                say(f"whileai: {path}: {spread.rows.read_as} (spread.group_key, text_key and reward_key name others)")
            report = spread.report
        elif source == "sample":
            from whileai.training.sample import sampled_pass_rate

            assert sampled is not None
            sampled_rate, line = sampled_pass_rate(sampled)
            say(f"whileai: the initial model's {line}")
            report = check_spread_groups(grading, sampled, strict=False, **checks)
        else:
            from whileai.simulations.agents import seeded_agent
            from whileai.simulations.rollouts import simulate
            from whileai.simulations.scenarios import load_scenarios

            sim = setup.simulate
            assert sim is not None  # and sim.agent is "seeded": the schema refuses a model agent for a training gate
            scenarios = load_scenarios(sim.scenarios, n=sim.num_scenarios, seed=sim.seed)
            rows = simulate(scenarios, seeded_agent(seed=sim.seed), n=sim.n, seed=sim.seed)
            report = grading.check_spread(rows, strict=False, **checks)
    except GraderUnavailable as error:  # a verdict like any other: --skip-spread-gate trains past it too
        unavailable = unavailable_report(error)
        say(heading)
        say(unavailable["conclusion"])
        return _gate_record(source, "broken", unavailable)
    say(heading)
    say(str(report))
    if source == "sample" and report.rule in ("too few", "unmoved"):  # a new task's initial model often passes rarely
        say(
            "whileai: the initial model's groups are too few to judge the grader on: gate it on rows of your own "
            "instead (spread.rows: rollouts whose groups mix passes and failures, a stronger model's say), or train "
            "anyway with --skip-spread-gate"
        )
    return _gate_record(source, report.verdict, report.as_dict(), sampled=sampled_rate)


_SOURCES = {
    "rows": "the recipe's spread.rows",
    "sample": "completions of the initial model",
    "simulate": "the seeded agent's simulated rollouts",
}


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


def dry_run(setup: TrainSetup) -> TrainingPlan:
    """What ``run_training(setup)`` would do (``whileai train --dry-run``), checked as the run checks before any model
    is built: the verifier against the dataset's columns. Imports no torch.

    Raises:
        BadInput: a verifier TRL could not call (``whileai.tasks.load.check_verifier``).
    """
    check_verifier(setup)
    return training_plan(setup)


def run_training(
    setup: TrainSetup,
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
        setup: the run, as ``whileai.config.build.train_setup`` built it from a recipe.
        skip_spread_gate: train even when the gate finds no spread (recorded in ``whileai_run.json``).
        resume: continue from the newest checkpoint in the run directory.
        say: where progress lines go.
        callbacks: extra ``transformers.TrainerCallback`` objects.

    Raises:
        BadInput: a run that cannot start (a folder that holds a run, a model the hub cannot give, a verifier TRL
            could not call, a trainer section GRPOConfig refuses).
        MissingExtra: torch, transformers, trl or datasets not installed.
        RunInterrupted: Ctrl-C (a ``KeyboardInterrupt``), after the run folder was marked.
    """
    out = setup.output_dir
    if resume and not out.is_dir():
        raise BadInput(f"--resume: {out} has no checkpoint-* folder and no run to start over; train without --resume")
    check_hub(setup.model, setup.where)  # a model id the hub cannot give fails now, not after the gate
    # The task and a verifier TRL can call with its columns, before the folder is touched (a dataset on the hub is
    # fetched later, once the gate has passed).
    task, verifier = task_and_verifier(setup, fetch=False)
    # One process writes into a run folder (the first of a launch holds it for all); the checks below run under the
    # lock, so that two runs started together cannot both find the folder free.
    with run_lock(out, "whileai train") if first_process() else contextlib.nullcontext():
        return _run_in_folder(setup, (task, verifier), skip_spread_gate, resume, say, callbacks)


def _run_in_folder(
    setup: TrainSetup,
    work: tuple[Any, Any],
    skip_spread_gate: bool,
    resume: bool,
    say: Callable[[str], None],
    callbacks: Sequence[Any],
) -> TrainingResult:
    """``run_training`` once the folder is this process's (``work``: the task, None for a hub dataset, and the
    verifier)."""
    out = setup.output_dir
    # Refused before anything is written, so the folder's own record stays as it was.
    used = training_output(out)
    if used and not resume:
        raise BadInput(
            f"{out} holds a run already ({', '.join(used)}): continue it with --resume, or train into another "
            f"folder with output_dir=NEW (or remove {out})"
        )
    if resume and not used and not (out / "recipe.yaml").is_file():
        raise BadInput(f"--resume: {out} has no checkpoint-* folder and no run to start over; train without --resume")
    if resume and (changes := arm_changes(out, setup.written)):
        raise BadInput(
            f"--resume: {setup.where} would go on training the run in {out} as another arm ({'; '.join(changes)}): "
            "its steps so far were trained as the first, and its figures would mix the two; train this recipe into "
            "a new folder with output_dir=NEW (a resume may change the grader's own settings, not its kind)"
        )
    if resume and (finished := finished_steps(out, setup.trainer.model_dump().get("max_steps"))) is not None:
        # Nothing to continue: TRL would train one step past the end and rewrite final/.
        if not (out / "whileai_run.json").is_file():
            rebuild_record(out, setup.where, finished[0])
            say(f"whileai: {out / 'whileai_run.json'} was lost: rebuilt from trainer_state.json and spread_gate.json")
        return TrainingResult(out, None, steps=finished[0], finished=finished)
    try:
        result = _train(setup, work, skip_spread_gate, resume, say, callbacks)
    except KeyboardInterrupt as stop:
        checkpoint = last_checkpoint(out)
        if first_process():
            mark_run(out, "interrupted", last_checkpoint=None if checkpoint is None else checkpoint[0].name)
        raise RunInterrupted(checkpoint, stop) from None
    except Exception as error:
        disk = refused_write(out, error)
        if first_process():
            mark_run(out, "failed", error=f"{type(error).__name__}: {error}", **({"disk": disk} if disk else {}))
        if disk is not None:
            raise BadInput(f"{out}: {disk} (the error: {describe(error)})") from error
        raise
    # Outside the try: the run's folder already says how it ended, and a peer lost here does not undo that.
    _end_process_group()
    return result


@dataclass
class _Run:
    """What the steps of ``_train`` hand each other."""

    setup: TrainSetup
    main: bool  # the first process of a launch: it gates and writes the run folder
    say: Callable[[str], None]
    checkpoint: tuple[Path, int] | None = None
    graded_before: list[dict[str, Any]] = field(default_factory=list)
    grading: GroupwiseGrading | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    watch: Any = None  # the spread watch (whileai.grading.watch.SpreadWatch), for a grader arm
    watch_stop: Any = None  # its callback, which ends training when the watch asks
    verifier_failures: Any = None  # the verifier's failures (whileai.rows.verdicts.VerifierFailures)
    verifier_stop: Any = None  # the callback that ends training when the verifier scores nothing
    verifier_before: Any = None  # the verifier's figures a resumed run recorded

    @property
    def out(self) -> Path:
        return self.setup.output_dir


def _train(
    setup: TrainSetup,
    work: tuple[Any, Any],
    skip_spread_gate: bool,
    resume: bool,
    say: Callable[[str], None],
    callbacks: Sequence[Any],
) -> TrainingResult:
    # Under accelerate/torchrun every process runs this function; the first one gates and writes the run folder.
    run = _Run(setup, first_process(), say)

    # 1. The folder, and the run's one grading object (the gate checks the grader that trains).
    gate = _open_folder(run, resume, skip_spread_gate)
    if gate is None or not _refused(gate, skip_spread_gate):  # a refusal known now is said before anything else
        # 2.-3. TRL's arguments, checked before a model is built (a bad trainer section costs nothing).
        quiet_libraries()
        from accelerate import PartialState

        from whileai.training.distributed import on_first_process

        args = _grpo_config(run)
        processes = PartialState().num_processes
        task, verifier = work if work[0] is not None else task_and_verifier(setup)  # a hub dataset, fetched now

        # 4. The gate where it has not run, and the tiny model, on the first process while the others wait.
        prepare = functools.partial(_prepare, run, gate, task, verifier, args, resume, skip_spread_gate)
        gate = on_first_process(prepare, processes, say)
    run.summary["spread"] = gate
    if _refused(gate, skip_spread_gate):
        run.summary.update(started=False, status="refused by the spread gate")
        if run.main:
            write_json(run.out / "whileai_run.json", run.summary)
        return TrainingResult(run.out, gate["spread"], spread_failed=True, spread_verdict=gate["verdict"])
    if gate["verdict"] not in ("yes", "skipped") and run.main:
        say("whileai: the spread gate did not pass; training anyway (--skip-spread-gate, recorded in the run)")

    # 5.-6. The reward function and TRL's trainer; train, save, and say how it went.
    trainer = _trainer(run, task, verifier, args, callbacks)
    return _fit(run, trainer, args, processes, gate)


def _open_folder(run: _Run, resume: bool, skip_spread_gate: bool) -> dict[str, Any] | None:
    """Step 1 and, on one process, step 2: the run folder (a resume drops what the steps it replays logged and keeps
    what came before for the figures), the run's grading, and the gate where it can run before anything heavy is
    imported (a refusal costs nothing). Returns the gate's record, or None when it runs later (spread.sample, or
    several processes: the first runs it once they are joined)."""
    setup, out, say = run.setup, run.out, run.say
    run.checkpoint = last_checkpoint(out) if resume else None
    if resume and run.main:
        if run.checkpoint is None:
            say(f"whileai: {out} has no checkpoint yet: starting its run over from the first step")
        else:
            say(f"whileai: resuming from {run.checkpoint[0].name}")
        run.graded_before = forget_after(out, 0 if run.checkpoint is None else run.checkpoint[1], say)
        with contextlib.suppress(OSError, ValueError, AttributeError):  # the verifier's failures up to the checkpoint
            run.verifier_before = json.loads((out / "whileai_run.json").read_text()).get("verifier")
    run.summary = {
        "recipe": setup.where,
        "skip_spread_gate": skip_spread_gate,
        "resumed": resume,
        "resumed_from": None if run.checkpoint is None else run.checkpoint[0].name,
    }
    run.grading = setup.make_grading(say if run.main else None)
    if not run.main:
        return None
    gate = None
    if resume:  # a resume keeps the verdict the run was gated on, unless what the gate reads has changed since
        gate, why = recorded_gate(out, setup.written)
        if gate is None:
            say(f"whileai: the spread gate runs again: {why}")
        else:
            say(f"whileai: the spread gate's verdict from {out / 'spread_gate.json'}: {gate['verdict']}")
    out.mkdir(parents=True, exist_ok=True)
    write_whole(out / "recipe.yaml", setup.shown)
    sampled = run.grading is not None and setup.gate_source == "sample"
    if gate is None and not sampled and int(os.environ.get("WORLD_SIZE") or 1) == 1:
        gate = _run_gate(setup, run.grading, say)
    return gate


def _prepare(
    run: _Run, gate: dict[str, Any] | None, task: Any, verifier: Any, args: Any, resume: bool, skip: bool
) -> dict[str, Any]:
    """Step 4, on the first process: the gate where it has not run, and the tiny model, in the order that spends
    least on a refusal (the gate on the initial model's completions needs the model first)."""
    setup, say = run.setup, run.say
    sampled = run.grading is not None and setup.gate_source == "sample"
    if gate is None and not sampled:
        gate = _run_gate(setup, run.grading, say)
    if gate is not None and _refused(gate, skip):
        return gate
    from whileai.training.tiny import build_recipe_model

    model, path = setup.model, model_path(setup)
    # A resume finds the tiny model it started from (saved model first, tokenizer last) and does not build it
    # again: the checkpoint holds the weights training has reached.
    if model.tiny is not None and not (resume and (Path(path) / "tokenizer_config.json").is_file()):
        build_recipe_model(path, model, task, setup.trainer.seed, say)
    if gate is None:
        from whileai.training.sample import sample_groups

        sample = setup.spread.sample
        assert sample is not None
        prompts = [task.rows[i % len(task.rows)] for i in range(sample.prompts)]  # a short dataset is reused
        limit = setup.verifier.timeout_s
        sampled = sample_groups(path, prompts, verifier, args, seed=sample.seed, verifier_timeout_s=limit)
        gate = _run_gate(setup, run.grading, say, sampled)
    return gate


def _trainer(run: _Run, task: Any, verifier: Any, args: Any, callbacks: Sequence[Any]) -> Any:
    """Step 5: the reward function (the grader's, or the verifier's alone for a binary arm) and TRL's trainer."""
    from whileai.grading.trl import TorchGather
    from whileai.integrations.trl_trainer import grpo_trainer
    from whileai.training.callbacks import RichProgress, StopAtCheckpoint, VerifierStop

    grading = run.grading
    watching: list[Any] = []
    limit = run.setup.verifier.timeout_s
    if grading is not None:
        # The run's figures cover the whole run: the groups graded before the checkpoint count too.
        grading.stats.record_groups([GradedGroup.from_dict(g) for g in run.graded_before], grading.hack_zero)
        log = GradingLog(run.out / "grading.jsonl")
        run.watch = _watch(run, args)
        if (watch := run.watch) is not None:
            run.watch_stop = StopAtCheckpoint(lambda: watch.stop_requested)
            watching.append(run.watch_stop)
        reward = grading.trl_reward(
            verifier, args.num_generations, gather=TorchGather(), on_graded=log, watch=run.watch,
            verifier_timeout_s=limit,
        )  # fmt: skip
    else:
        reward = binary_reward(verifier, args.num_generations, gather=TorchGather(), verifier_timeout_s=limit)
    failures = run.verifier_failures = reward.verifier_failures
    run.verifier_stop = VerifierStop(lambda: failures.broken, shared=True)
    path, model = model_path(run.setup), run.setup.model
    tokenizer = None
    if model.tiny is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    return grpo_trainer(
        model=path,
        reward=reward,
        args=args,
        train_rows=task.rows,
        eval_rows=task.eval_rows,
        processing_class=tokenizer,
        environment_factory=task.environment_factory,
        callbacks=[RichProgress(run.say), *watching, run.verifier_stop, *callbacks],
        where=run.setup.where,
        say=run.say if run.main else None,
        tool_calls=model.tool_calls,
        lora=None if model.lora is None else model.lora.peft_kwargs(),
    )


def _watch(run: _Run, args: Any) -> Any:
    """The run's spread watch (``spread.watch``), on every process: the grading process checks, the others learn its
    decision from the figures it logs. None when the recipe turns it off."""
    from whileai.grading.watch import SpreadWatch, WatchLog

    settings = run.setup.spread.watch
    if not settings.enabled:
        return None
    record = WatchLog(run.out / "watch.jsonl") if run.main else None
    return SpreadWatch(
        run.grading, settings, say=run.say, on_check=record, seed=run.setup.spread.seed,
        batches_per_step=generations_per_step(args),
    )  # fmt: skip


def _fit(run: _Run, trainer: Any, args: Any, processes: int, gate: dict[str, Any]) -> TrainingResult:
    """Step 6: train, save the final model (not after a stop the watch or a broken verifier asked for: the checkpoint
    it saved is where a resume goes on) and ``whileai_run.json``, and say how it went."""
    out, grading, checkpoint = run.out, run.grading, run.checkpoint
    started = time.perf_counter()
    if run.main:
        begin_record(out, run.summary)
    trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint[0]))
    stopped = run.watch_stop is not None and run.watch_stop.stopped_at is not None
    failures, broken = run.verifier_failures, run.verifier_stop.stopped_at is not None
    if run.watch is not None and run.main and not (stopped or broken):  # a check due at the last step
        run.watch.check_through(trainer.state.global_step)
    if not (stopped or broken):
        trainer.save_model(str(out / "final"))
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    if run.watch is not None and (watched := run.watch.summary()) is not None:
        run.summary["watch"] = watched
    if stopped:
        assert run.watch is not None
        why = run.watch.checks[-1].why if run.watch.checks else "the grading process's watch asked to stop"
        run.summary["stopped_by_watch"] = {"step": run.watch_stop.stopped_at, "why": why}
    if broken:
        run.summary["stopped_by_verifier"] = {"step": run.verifier_stop.stopped_at, "why": failures.why}
    if failures.count or failures.unscored or run.verifier_before:
        run.summary["verifier"] = failures.figures(run.verifier_before)
    run.summary.update(
        status="stopped by the verifier" if broken else "stopped by the watch" if stopped else "finished",
        started=True,
        steps=trainer.state.global_step,
        seconds=round(time.perf_counter() - started, 1),
        grader=grading.figures() if grading is not None else None,
        grader_line=str(grading.stats) if grading is not None else None,
        scale_rewards=args.scale_rewards,
        use_vllm=args.use_vllm,
        world_size=processes,  # the processes that trained; rank 0 graded every group for all of them
    )
    if grading is not None:
        run.summary["trained_as"] = mostly_fell_back(grading.stats.fallbacks, grading.stats.sent) or "groupwise"
    if trainer.is_world_process_zero():
        write_json(out / "whileai_run.json", run.summary)
    if grading is not None and run.main:
        run.say(str(grading.stats))
    steps = trainer.state.global_step
    result = TrainingResult(out, gate["spread"], False, steps, run.summary.get("grader") or {}, gate["verdict"])
    result.watch_stopped = run.summary.get("stopped_by_watch")
    result.verifier_stopped, result.verifier = run.summary.get("stopped_by_verifier"), run.summary.get("verifier")
    result.verifier_trace = failures.trace
    result.plain = "" if run.summary.get("trained_as", "groupwise") == "groupwise" else run.summary["trained_as"]
    return result


def _grpo_config(run: _Run) -> Any:
    """TRL's ``GRPOConfig`` of the recipe on this machine (``grpo_kwargs``, what the dry run prints), with torch's CPU
    threads set on a CPU."""
    import torch
    from trl import GRPOConfig

    from whileai.training.plan import Machine, cpu_threads, grpo_kwargs

    machine = Machine.detect()
    kwargs = grpo_kwargs(run.setup, machine)
    if run.main and not kwargs["use_vllm"]:
        run.say(f"whileai: generating with {machine.generation(kwargs)}")
    if not machine.cuda:
        threads = cpu_threads(run.setup.model)
        if threads is not None:
            torch.set_num_threads(threads)
    try:
        return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise BadInput(f"{run.setup.where}: trainer: {err}") from None
