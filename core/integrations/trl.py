"""TRL's side of groupwise grading: the reward function ``GRPOTrainer`` calls, and its calling convention.

``GroupwiseGrading`` knows groups and answers; this module knows the trainer. TRL 1.16 (``grpo_trainer.py``,
``_calculate_rewards``) calls a reward function by keyword with ``prompts``, ``completions``, ``completion_ids``,
every extra dataset column, ``trainer_state``, ``log_metric`` (bound to the trainer) and ``log_extra``, on
``num_generations`` consecutive completions per prompt (``num_generations_eval`` in evaluation), each process on its
own slice; it then subtracts each group's mean (and divides by a std unless ``scale_rewards="none"``).

- :func:`groupwise_reward_function`: what ``GroupwiseGrading.trl_reward`` returns (``A'_i + mean(R)``, so TRL's
  mean subtraction gives equation 3), with the distributed gather and the logs ``whileai spread`` reads back.
- :func:`binary_reward`: the verifier's reward as it is, logged the same way (a comparison arm).
- :func:`trl_phase`, :func:`group_labels`, :class:`BatchGather`: the phase and group size TRL is in, the labels that
  regroup its completion logs, the protocol of the processes' gather.

It imports no trainer and no torch: the gather is handed in (``whileai.training.distributed`` builds one on
torch.distributed).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from whileai.grading.groupwise import GradedGroup, GroupwiseGrading, verifier_reward
from whileai.grading.text import completion_text, prompt_text

__all__ = ["BatchGather", "binary_reward", "group_labels", "groupwise_reward_function", "trl_phase"]


def groupwise_reward_function(
    grading: GroupwiseGrading,
    verifier: Callable[..., Sequence[float]],
    num_generations: int,
    *,
    gather: BatchGather | None = None,
    on_graded: Callable[[list[GradedGroup], Any], None] | None = None,
) -> Callable[..., list[float]]:
    """The reward function of ``grading.trl_reward(verifier, num_generations, ...)`` (see its docstring)."""
    if isinstance(num_generations, bool) or not isinstance(num_generations, numbers.Integral):
        raise ValueError(f"num_generations must be a positive integer, got {num_generations!r}")
    if num_generations < 1:
        raise ValueError(f"num_generations must be a positive integer, got {num_generations!r}")
    default_size = int(num_generations)

    def groupwise_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        distributed = gather is not None and gather.world_size > 1
        offset = 0
        phase, size = trl_phase(kwargs, default_size)  # num_generations_eval in an evaluation batch
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
        rewards = [verifier_reward(r) for r in verifier(prompts=prompts, completions=completions, **kwargs)]
        if len(rewards) != len(completions):
            raise ValueError(f"the verifier returned {len(rewards)} rewards for {len(completions)} completions")
        task_ids = kwargs.get("task_id", kwargs.get("scenario_id"))
        if task_ids is None:
            task_ids = [prompt_text(p) for p in prompts]
        batch = (
            [prompt_text(p) for p in prompts],
            [completion_text(c) for c in completions],
            rewards,
            [str(t) for t in task_ids],
        )
        if distributed:
            assert gather is not None
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
                    outcome = _grade_for_trl(grading, batch, size, phase, on_graded, kwargs)
                except Exception as exc:  # tell the other processes instead of leaving them waiting
                    outcome = exc
            outcome = gather.broadcast(outcome)
            if isinstance(outcome, Exception):
                raise outcome
            shaped, metrics = outcome
            shaped = shaped[offset : offset + len(rewards)]
        else:
            shaped, metrics = _grade_for_trl(grading, batch, size, phase, on_graded, kwargs)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for name, value in metrics.items():
                log_metric(name, value)
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("whileai_reward", rewards)
            log_extra("whileai_group", group_labels(kwargs.get("trainer_state"), offset, len(rewards), size))
        return shaped

    groupwise_reward.__name__ = f"groupwise_{grading.mode}"
    groupwise_reward.__qualname__ = groupwise_reward.__name__
    return groupwise_reward


def _grade_for_trl(
    grading: GroupwiseGrading,
    batch: tuple[list[str], list[str], list[float], list[str]],
    size: int,
    phase: str,
    on_graded: Callable[[list[GradedGroup], Any], None] | None,
    kwargs: Mapping[str, Any],
) -> tuple[list[float], dict[str, float]]:
    prompts, completions, rewards, task_ids = batch
    before = grading.stats.as_dict()
    graded = grading.grade_batch(rewards, prompts, completions, size, task_id=task_ids)
    for group in graded:
        group.phase = phase
    if on_graded is not None:
        on_graded(graded, kwargs.get("trainer_state"))
    metrics = {f"groupwise/{k}": v for k, v in _batch_metrics(graded, before, grading.stats.as_dict()).items()}
    metrics["whileai/pass_rate"] = sum(r > 0 for r in rewards) / max(len(rewards), 1)
    return [s for g in graded for s in g.shaped], metrics


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


def group_labels(trainer_state: Any, offset: int, count: int, size: int) -> list[str]:
    """``"step:group"`` for each of ``count`` completions starting at ``offset`` in a batch of groups of ``size``.

    Logged into TRL's completion logs so a run's rollouts can be regrouped exactly as they were graded (two groups of
    one prompt in one batch stay two groups).
    """
    step = getattr(trainer_state, "global_step", 0)
    return [f"{step}:{(offset + i) // size}" for i in range(count)]


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


def _batch_metrics(graded: list[GradedGroup], before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The figures of one batch, for TRL's ``log_metric``."""
    scores = [s for g in graded for s in g.scores]
    mean = sum(scores) / len(scores) if scores else 0.0
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores)) if scores else 0.0
    return {
        "groups": float(len(graded)),
        "mixed": float(sum(g.mixed for g in graded)),
        "grader_calls": float(after["grader_calls"] - before["grader_calls"]),
        "fallbacks": float(after["failed"] - before["failed"]),
        "hacks_zeroed": float(after["hacks_zeroed"] - before["hacks_zeroed"]),
        "score_mean": mean,
        "score_std": std,
    }


def binary_reward(
    verifier: Callable[..., Sequence[float]], num_generations: int, *, gather: BatchGather | None = None
) -> Callable[..., list[float]]:
    """The verifier's reward as it is (a binary arm), logging the same pass rate and completion columns as
    :func:`groupwise_reward_function` so two arms read alike.

    None, NaN and inf are "unscorable" (NaN: TRL gives advantage 0 and leaves it out of the group mean); an inf left
    as it is would turn the group's other advantages into -3.4e38 through TRL's ``nan_to_num``. ``gather`` places
    this process's slice in the batch for the group labels (rank 0's slice first).
    """

    def binary(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        rewards = [_finite_or_nan(r) for r in verifier(prompts=prompts, completions=completions, **kwargs)]
        if callable(kwargs.get("log_metric")):
            kwargs["log_metric"]("whileai/pass_rate", sum(r > 0 for r in rewards) / max(len(rewards), 1))
            kwargs["log_metric"]("whileai/unscorable", float(sum(math.isnan(r) for r in rewards)))
        if callable(kwargs.get("log_extra")):
            kwargs["log_extra"]("whileai_reward", rewards)
            offset = 0
            if gather is not None and gather.world_size > 1:
                offset = sum(gather.all_gather(len(rewards))[: gather.rank])
            _, size = trl_phase(kwargs, num_generations)
            kwargs["log_extra"]("whileai_group", group_labels(kwargs.get("trainer_state"), offset, len(rewards), size))
        return rewards

    return binary


def _finite_or_nan(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        number = float(value)
    except OverflowError:
        return math.nan
    return number if math.isfinite(number) else math.nan
