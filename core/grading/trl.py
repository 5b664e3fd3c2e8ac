"""TRL's side of groupwise grading: the reward function ``GRPOTrainer`` calls, and its calling convention.

``GroupwiseGrading`` knows groups and answers; this module knows how TRL calls a reward function, without importing TRL
(the trainer whileai builds is ``whileai.integrations.trl_trainer``'s, which imports it). TRL 1.16 (``grpo_trainer.py``,
``_calculate_rewards``) calls a reward function by keyword with ``prompts``, ``completions``, ``completion_ids``, every
extra dataset column, ``trainer_state``, ``log_metric`` (bound to the trainer) and ``log_extra``, on ``num_generations``
consecutive completions per prompt (``num_generations_eval`` in evaluation), each process on its own slice; it then
subtracts each group's mean (and divides by a std unless ``scale_rewards="none"``).

- :func:`groupwise_reward_function`: what ``GroupwiseGrading.trl_reward`` returns (``A'_i + mean(R)``, so TRL's
  mean subtraction gives equation 3), with the distributed gather and the logs ``whileai spread`` reads back.
- :func:`binary_reward`: the verifier's reward as it is, logged the same way (a comparison arm).
- :func:`trl_phase`, :func:`group_labels`, :class:`BatchGather`: the phase and group size TRL is in, the labels that
  regroup its completion logs, the protocol of the processes' gather.
- :func:`refuse_off_equation_3`: the one rule that keeps a trainer with a groupwise reward function on equation 3,
  applied by the reward function on its first call and by ``whileai.integrations.trl_trainer`` when it builds one.

Importing it imports no trainer and no torch: ``TorchGather`` imports torch.distributed when it is called.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from whileai.defaults import VERIFIER_TIMEOUT_S
from whileai.errors import BadInput
from whileai.grading.guard import signal_problems
from whileai.rows.files import logged_step
from whileai.rows.text import completion_text, prompt_text
from whileai.rows.verdicts import VerifierFailures, verifier_rewards

if TYPE_CHECKING:  # annotations only: GroupwiseGrading.trl_reward imports this module when it is called
    from whileai.grading.group import GradedGroup
    from whileai.grading.groupwise import GroupwiseGrading

_log = logging.getLogger("whileai.verifier")

__all__ = [
    "BatchGather",
    "BatchNames",
    "TorchGather",
    "binary_reward",
    "group_labels",
    "groupwise_reward_function",
    "refuse_off_equation_3",
    "trl_phase",
]


def groupwise_reward_function(
    grading: GroupwiseGrading,
    verifier: Callable[..., Sequence[float]],
    num_generations: int,
    *,
    gather: BatchGather | None = None,
    on_graded: Callable[[list[GradedGroup], Any], None] | None = None,
    watch: Any = None,
    verifier_timeout_s: float | None = VERIFIER_TIMEOUT_S,
) -> Callable[..., list[float]]:
    """The reward function of ``grading.trl_reward(verifier, num_generations, ...)`` (see its docstring)."""
    if isinstance(num_generations, bool) or not isinstance(num_generations, numbers.Integral):
        raise ValueError(f"num_generations must be a positive integer, got {num_generations!r}")
    if num_generations < 1:
        raise ValueError(f"num_generations must be a positive integer, got {num_generations!r}")
    default_size = int(num_generations)
    names = BatchNames()
    failures = VerifierFailures(_log.warning, verifier)
    checked: weakref.WeakSet[Any] = weakref.WeakSet()  # the trainers already checked to train on equation 3

    def groupwise_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        trainer = getattr(kwargs.get("log_metric"), "__self__", None)  # TRL binds log_metric to its trainer
        if hasattr(trainer, "reward_funcs") and trainer not in checked:
            # A GRPOTrainer built in Python reaches here without whileai's check: refuse before the first step (this
            # function is groupwise even where the user wrapped it in one of their own).
            refuse_off_equation_3(trainer, groupwise=True)
            checked.add(trainer)
        distributed = gather is not None and gather.world_size > 1
        offset = 0
        phase, size = trl_phase(kwargs, default_size)  # num_generations_eval in an evaluation batch
        batch_name = names.next(phase, kwargs.get("trainer_state"))
        if not distributed and not completions:
            return []
        if not distributed and len(completions) % size:
            if phase == "train":
                fix = "per_device_train_batch_size * steps_per_generation is a multiple of num_generations"
            else:
                fix = "per_device_eval_batch_size is a multiple of num_generations_eval"
            name = "num_generations" if phase == "train" else "num_generations_eval"
            raise ValueError(
                f"TRL passed {len(completions)} completions, not a multiple of {name}={size}: check that {fix}"
            )
        before = failures.count
        rewards = verifier_rewards(verifier, prompts, completions, kwargs, failures, verifier_timeout_s)
        column = kwargs.get("task_id", kwargs.get("scenario_id"))
        task_ids = None if column is None else [t if type(t) is str else str(t) for t in column]
        if distributed:
            assert gather is not None
            texts = (prompts, completions, rewards, task_ids)
            shaped, metrics, offset = _grade_across_processes(
                gather, grading, texts, size, phase, batch_name, on_graded, kwargs, watch
            )
        else:
            # One process: the conversations go to grading as they are, and only the groups sent to the grader are
            # rendered (a task falls back to its prompt's text when no column names it).
            shaped, metrics = _grade_for_trl(
                grading, (prompts, completions, rewards, task_ids), size, phase, batch_name, on_graded, kwargs, watch
            )
        if watch is not None:
            watch.note(metrics)  # every process learns the watch's decision from the grading process's figures
        metrics["whileai/verifier_failures"] = float(failures.count - before)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for name, value in metrics.items():
                log_metric(name, value)
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("whileai_reward", rewards)
            log_extra("whileai_group", group_labels(batch_name, offset, len(rewards), size))
        return shaped

    groupwise_reward.__name__ = f"groupwise_{grading.mode}"
    groupwise_reward.__qualname__ = groupwise_reward.__name__
    groupwise_reward.grading = grading  # type: ignore[attr-defined]  # marks it groupwise (refuse_off_equation_3)
    groupwise_reward.verifier_failures = failures  # type: ignore[attr-defined]  # a run stops on a broken verifier
    return groupwise_reward


def refuse_off_equation_3(trainer: Any, *, recipe: str | None = None, groupwise: bool | None = None) -> None:
    """Raise ``BadInput`` when a ``GRPOTrainer`` that holds a groupwise reward function would move its advantages off
    equation 3 (:func:`whileai.grading.guard.signal_problems`: std scaling, reward weights, another reward function,
    ``normalize_then_sum``); a trainer without one (a binary arm) may do any of these.

    The one rule for every way a trainer is made: ``whileai train`` and ``GroupwiseGRPOTrainer`` check on
    construction, and the reward function on its first call, for a trainer built in Python around
    ``GroupwiseGrading.trl_reward``. It reads the trainer's functions and settings, never the values: a user's
    function wrapped around the groupwise one that changes what it returns is not seen.

    Args:
        trainer: a built ``GRPOTrainer`` (its ``reward_funcs``, ``reward_func_names``, ``reward_weights``,
            ``scale_rewards`` and ``multi_objective_aggregation``, as TRL 1.16 keeps them).
        recipe: the recipe the trainer was built from: the fix is then worded for it (``trainer.scale_rewards:
            none``) and the message names it; None words it for ``GRPOConfig``.
        groupwise: whether the trainer trains on a groupwise reward; None: whether one of its reward functions is
            one (``trl_reward``'s functions carry ``grading``).
    """
    functions = list(getattr(trainer, "reward_funcs", None) or ())
    if groupwise is None:
        groupwise = any(callable(f) and hasattr(f, "grading") for f in functions)
    if not groupwise:
        return
    weights = getattr(trainer, "reward_weights", None)
    problems = signal_problems(
        scale_rewards=getattr(trainer, "scale_rewards", "none"),
        multi_objective_aggregation=getattr(trainer, "multi_objective_aggregation", "sum_then_normalize"),
        reward_weights=None if weights is None else [float(w) for w in weights],
        reward_functions=[str(name) for name in getattr(trainer, "reward_func_names", None) or ()],
        words="python" if recipe is None else "recipe",
    )
    if problems:
        where = f"{recipe}: the trainer" if recipe is not None else f"this {type(trainer).__name__}"
        raise BadInput(f"{where} would not train on equation 3: {'; '.join(problems)}")


def _grade_across_processes(
    gather: BatchGather,
    grading: GroupwiseGrading,
    mine: tuple[Sequence[Any], Sequence[Any], list[float], list[str] | None],
    size: int,
    phase: str,
    batch_name: str,
    on_graded: Callable[[list[GradedGroup], Any], None] | None,
    kwargs: Mapping[str, Any],
    watch: Any = None,
) -> tuple[list[float], dict[str, float], int]:
    """Several processes: each renders its own slice and hands it to rank 0 in rank order (texts, not
    conversations, cross the gather), rank 0 grades whole groups once and every process gets its slice of the shaped
    rewards back, with the batch's figures and its slice's offset in the batch. An error on rank 0 is raised on
    every process, so none waits for an answer that will not come."""
    prompts, completions, rewards, task_ids = mine
    prompt_texts = [prompt_text(p) for p in prompts]
    batch: tuple[list[Any], list[Any], list[float], list[str] | None] = (
        prompt_texts,
        [completion_text(c) for c in completions],
        rewards,
        prompt_texts if task_ids is None else task_ids,
    )
    slices = gather.all_gather(batch)
    offset = sum(len(part[2]) for part in slices[: gather.rank])
    batch = tuple([x for part in slices for x in part[field]] for field in range(4))  # type: ignore[assignment]
    if len(batch[2]) % size:
        raise ValueError(
            f"the processes hold {len(batch[2])} completions in all, not a multiple of num_generations={size}"
        )
    outcome: Any = None
    if gather.rank == 0:
        try:
            outcome = _grade_for_trl(grading, batch, size, phase, batch_name, on_graded, kwargs, watch)
        except Exception as exc:  # tell the other processes instead of leaving them waiting
            outcome = exc
    outcome = gather.broadcast(outcome)
    if isinstance(outcome, Exception):
        raise outcome
    shaped, metrics = outcome
    return shaped[offset : offset + len(rewards)], metrics, offset


def _grade_for_trl(
    grading: GroupwiseGrading,
    batch: tuple[Sequence[Any], Sequence[Any], list[float], list[str] | None],
    size: int,
    phase: str,
    name: str,
    on_graded: Callable[[list[GradedGroup], Any], None] | None,
    kwargs: Mapping[str, Any],
    watch: Any = None,
) -> tuple[list[float], dict[str, float]]:
    prompts, completions, rewards, task_ids = batch
    stats = grading.stats
    before = (stats.grader_calls, stats.failed, stats.hacks_zeroed)
    judge_before = _judge_counts(grading)
    started = time.perf_counter()
    graded = grading.grade_batch(rewards, prompts, completions, size, task_id=task_ids)
    seconds = time.perf_counter() - started
    for index, group in enumerate(graded):
        group.phase, group.label = phase, f"{name}:{index}"  # the label its completions are logged under
    if on_graded is not None:
        on_graded(graded, kwargs.get("trainer_state"))
    metrics = _batch_metrics(graded, before, (stats.grader_calls, stats.failed, stats.hacks_zeroed))
    metrics["groupwise/grader_seconds"] = seconds
    metrics["whileai/pass_rate"] = sum(sum(g.passed) for g in graded) / max(len(rewards), 1)  # R_i > 0
    if judge_before is not None:
        after = _judge_counts(grading) or {}
        metrics.update({f"judge/{key}": float(after.get(key, 0) - value) for key, value in judge_before.items()})
    if watch is not None and phase == "train":
        step = logged_step(kwargs.get("trainer_state"), phase)
        metrics.update(watch.observe(step, graded, prompts, completions, size))
    return [s for g in graded for s in g.shaped], metrics


# A judge's counters logged per batch (``judge/calls``, ...): what it cost to grade that batch.
_JUDGE_COUNTS = ("calls", "retries", "cache_hits", "tokens_in", "tokens_out")


def _judge_counts(grading: GroupwiseGrading) -> dict[str, float] | None:
    """The grader's own counters named in ``_JUDGE_COUNTS`` (the HTTP judge keeps them), or None for a grader that
    keeps none."""
    own = getattr(grading.grader, "stats", None)
    if own is None or not callable(getattr(own, "as_dict", None)):
        return None
    figures = own.as_dict()
    return {key: float(figures.get(key) or 0) for key in _JUDGE_COUNTS}


def trl_phase(kwargs: Mapping[str, Any], default_size: int) -> tuple[str, int]:
    """Which phase TRL is scoring a batch for, and its group size: ``("train", num_generations)`` or
    ``("eval", num_generations_eval)``, picked as TRL 1.16's ``_generate_and_score_completions`` does, by
    ``model.training``.

    TRL hands a reward function its bound ``log_metric``, whose ``__self__`` is the trainer; without one (a direct
    call) the phase is ``"train"`` and the group size the reward function's own ``num_generations``.
    """
    trainer = getattr(kwargs.get("log_metric"), "__self__", None)
    training = getattr(getattr(trainer, "model", None), "training", None)
    if not isinstance(training, bool):
        return "train", default_size
    phase = "train" if training else "eval"
    size = getattr(trainer, "num_generations" if training else "num_generations_eval", None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return phase, default_size
    return phase, size


def generations_per_step(args: Any) -> int:
    """How many batches TRL generates and scores in one optimizer step: ``gradient_accumulation_steps`` over
    ``steps_per_generation * num_iterations`` micro-steps between generations, at least one (TRL 1.16's
    ``_prepare_inputs`` generates when its micro-step count is a multiple of the latter).

    Example:
        >>> from types import SimpleNamespace as A
        >>> generations_per_step(A(gradient_accumulation_steps=4, steps_per_generation=2, num_iterations=1))
        2
        >>> generations_per_step(A(gradient_accumulation_steps=1, steps_per_generation=4, num_iterations=1))
        1
    """
    every = (getattr(args, "steps_per_generation", None) or 1) * (getattr(args, "num_iterations", None) or 1)
    return max(1, int(getattr(args, "gradient_accumulation_steps", 1) or 1) // every)


class BatchNames:
    """A name for each batch TRL hands a reward function, unique in the run and the same on every process.

    TRL can score several batches at one step: gradient accumulation with ``steps_per_generation``, or an evaluation
    over several batches. A name is the step (:func:`logged_step`), the batch's number at that step and phase, and
    the phase: ``"4.0"``, ``"4.1"`` for training, ``"eval-3.0"`` for evaluation. Every process calls its reward
    function once per batch, so the counters agree across processes.

    Example:
        >>> names, state = BatchNames(), type("State", (), {"global_step": 3})()
        >>> names.next("train", state), names.next("train", state), names.next("eval", state)
        ('4.0', '4.1', 'eval-3.0')
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], int] = {}

    def next(self, phase: str, trainer_state: Any) -> str:
        step = logged_step(trainer_state, phase)
        number = self._seen.get((phase, step), 0)
        self._seen[(phase, step)] = number + 1
        return f"{step}.{number}" if phase == "train" else f"{phase}-{step}.{number}"


def group_labels(batch: str, offset: int, count: int, size: int) -> list[str]:
    """``"batch:group"`` for each of ``count`` completions starting at ``offset`` in a batch of groups of ``size``.

    Logged into TRL's completion logs (``whileai_group``) and beside each group in ``grading.jsonl`` (``group``), so
    a run's rollouts can be regrouped exactly as they were graded and joined to their grading one to one (two groups
    of one prompt in one batch stay two groups, and so do two batches at one step).
    """
    if count <= 0:
        return []
    first = offset // size
    labels: list[str] = []
    for group in range(first, (offset + count - 1) // size + 1):
        labels += [f"{batch}:{group}"] * size  # one string per group, repeated
    skip = offset - first * size
    return labels[skip : skip + count]


class BatchGather(Protocol):
    """How a reward function sees the other training processes (rank 0 grades for all)."""

    @property
    def world_size(self) -> int: ...

    @property
    def rank(self) -> int: ...

    def all_gather(self, value: Any) -> list[Any]:
        """Every process's ``value``, in rank order."""
        ...

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every process."""
        ...


class TorchGather:
    """The ``BatchGather`` of a training run: ``all_gather`` and ``broadcast`` of Python objects over the default
    torch.distributed group.

    TRL calls a reward function on each process with that process's slice of the generation batch, in rank order; a
    group of ``num_generations`` completions straddles two processes unless ``per_device_train_batch_size *
    steps_per_generation`` is a multiple of it. With this gather the reward function collects every slice, grades
    whole groups once on rank 0 and hands each process its slice back. It reads the process group when called (torch
    imported then), so it can be built before the trainer initializes distributed training; with one process it is a
    no-op.
    """

    @staticmethod
    def _dist() -> Any:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None

    @property
    def world_size(self) -> int:
        dist = self._dist()
        return dist.get_world_size() if dist is not None else 1

    @property
    def rank(self) -> int:
        dist = self._dist()
        return dist.get_rank() if dist is not None else 0

    def all_gather(self, value: Any) -> list[Any]:
        dist = self._dist()
        if dist is None:
            return [value]
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, value)
        return out

    def broadcast(self, value: Any) -> Any:
        dist = self._dist()
        if dist is None:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def _batch_metrics(
    graded: list[GradedGroup], before: tuple[int, int, int], after: tuple[int, int, int]
) -> dict[str, float]:
    """The figures of one batch, for TRL's ``log_metric``; ``before`` and ``after`` are the grading object's
    ``(grader_calls, failed, hacks_zeroed)`` counters around it."""
    scores = [s for g in graded for s in g.scores]
    mean = sum(scores) / len(scores) if scores else 0.0
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores)) if scores else 0.0
    return {
        "groupwise/groups": float(len(graded)),
        "groupwise/mixed": float(sum(g.mixed for g in graded)),
        "groupwise/grader_calls": float(after[0] - before[0]),
        "groupwise/fallbacks": float(after[1] - before[1]),
        "groupwise/hacks_zeroed": float(after[2] - before[2]),
        "groupwise/score_mean": mean,
        "groupwise/score_std": std,
        "whileai/unscorable": float(sum(g.unscorable for g in graded)),
    }


def binary_reward(
    verifier: Callable[..., Sequence[float]],
    num_generations: int,
    *,
    gather: BatchGather | None = None,
    verifier_timeout_s: float | None = VERIFIER_TIMEOUT_S,
) -> Callable[..., list[float]]:
    """The verifier's reward as it is (a binary arm), logging the same pass rate and completion columns as
    :func:`groupwise_reward_function` so two arms read alike.

    None, NaN, inf and values float32 holds only as inf are "unscorable" (NaN: TRL gives advantage 0 and leaves it
    out of the group mean); an inf left as it is would turn the group's other advantages into -3.4e38 through TRL's
    ``nan_to_num``. ``gather`` places this process's slice in the batch for the group labels (rank 0's slice first);
    ``verifier_timeout_s`` is the verifier's limit on a batch (``whileai.rows.verdicts.verifier_rewards``).
    """

    names = BatchNames()
    failures = VerifierFailures(_log.warning, verifier)

    def binary(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        phase, size = trl_phase(kwargs, num_generations)
        batch_name = names.next(phase, kwargs.get("trainer_state"))
        before = failures.count
        rewards = verifier_rewards(verifier, prompts, completions, kwargs, failures, verifier_timeout_s)
        if callable(kwargs.get("log_metric")):
            kwargs["log_metric"]("whileai/pass_rate", sum(r > 0 for r in rewards) / max(len(rewards), 1))
            kwargs["log_metric"]("whileai/unscorable", float(sum(math.isnan(r) for r in rewards)))
            kwargs["log_metric"]("whileai/verifier_failures", float(failures.count - before))
        if callable(kwargs.get("log_extra")):
            kwargs["log_extra"]("whileai_reward", rewards)
            offset = 0
            if gather is not None and gather.world_size > 1:
                offset = sum(gather.all_gather(len(rewards))[: gather.rank])
            kwargs["log_extra"]("whileai_group", group_labels(batch_name, offset, len(rewards), size))
        return rewards

    binary.verifier_failures = failures  # type: ignore[attr-defined]
    return binary
