"""What keeps a grader arm's training signal on equation 3, checked on the recipe and again on the real trainer.

``GroupwiseGrading.trl_reward`` returns ``A'_i + mean(R)`` so that TRL's group-mean subtraction yields ``A'_i``. That
holds only when TRL does nothing else to the reward. TRL 1.16 (``grpo_trainer.py``, ``_generate_and_score_completions``)
can do four other things to it, each of which moves the advantages off equation 3:

- divide by a std: ``scale_rewards`` ``"group"`` or ``"batch"`` (``True`` is ``"group"``);
- normalize each reward function before summing: ``multi_objective_aggregation: normalize_then_sum`` (then a batch
  std division, whatever ``scale_rewards`` says);
- weight the reward: ``reward_weights`` other than ``[1]``;
- add reward functions: the trainer's own list holds more than the grader's one (an environment class that defines
  ``get_reward`` is added by TRL as one more function of weight 1).

:func:`signal_problems` lists what a configuration does of these, in words that say the fix. The recipe schema
calls it with the recipe's trainer section (``whileai validate``), the training run with the built ``GRPOTrainer``
before its first step. A binary arm (no grader) may use any of them.

verl (``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage``) makes the same promise under
``algorithm.adv_estimator=grpo`` and ``algorithm.norm_adv_by_std_in_grpo=False``: it sums each response's token rewards
and subtracts the mean of its ``uid`` group. :func:`verl_signal_problems` lists what a verl config does besides, and
what keeps whileai's reward manager from seeing whole groups, in the same words.

Pure: no torch, no TRL, no verl.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["config_value", "signal_problems", "verl_signal_problems"]


def signal_problems(
    *,
    scale_rewards: Any,
    multi_objective_aggregation: Any = "sum_then_normalize",
    reward_weights: Sequence[float] | None = None,
    reward_functions: Sequence[str] | None = None,
    words: str = "recipe",
) -> list[str]:
    """What a grader arm's configuration does to the reward besides TRL's group-mean subtraction.

    Args:
        scale_rewards: TRL's ``scale_rewards`` (``"none"`` or ``False`` is right).
        multi_objective_aggregation: TRL's aggregation (``"sum_then_normalize"`` is right).
        reward_weights: TRL's ``reward_weights`` (None or ``[1]`` is right).
        reward_functions: the names of the trainer's reward functions once built (one, the grader's, is right);
            None before the trainer exists.
        words: whose words the fix is in: ``"recipe"`` (``trainer.scale_rewards: none``, for a recipe) or
            ``"python"`` (``GRPOConfig(scale_rewards="none")``, for a trainer built in Python).

    Returns:
        One sentence per problem, naming the setting and the fix; empty when the signal is equation 3.

    Example:
        >>> signal_problems(scale_rewards="group")
        ["trainer.scale_rewards is 'group': TRL would divide each group by its std and rescale the moved mass; set trainer.scale_rewards: none"]
        >>> print(signal_problems(scale_rewards="group", words="python")[0])
        GRPOConfig.scale_rewards is 'group': TRL would divide each group by its std and rescale the moved mass; set GRPOConfig(scale_rewards="none")
    """  # noqa: E501
    if words not in ("recipe", "python"):
        raise ValueError(f"words must be 'recipe' or 'python', got {words!r}")
    where = "trainer" if words == "recipe" else "GRPOConfig"

    def setting(name: str, value: str) -> str:
        return f"trainer.{name}: {value}" if words == "recipe" else f'GRPOConfig({name}="{value}")'

    def remove(name: str) -> str:
        return f"remove {name}" if words == "recipe" else f"leave GRPOConfig's {name} unset"

    problems: list[str] = []
    if scale_rewards not in ("none", False):
        problems.append(
            f"{where}.scale_rewards is {scale_rewards!r}: TRL would divide each group by its std and rescale the "
            f"moved mass; set {setting('scale_rewards', 'none')}"
        )
    if multi_objective_aggregation != "sum_then_normalize":
        problems.append(
            f"{where}.multi_objective_aggregation is {multi_objective_aggregation!r}: TRL would normalize the "
            f"reward by its std before the advantage; {remove('multi_objective_aggregation')} (the default "
            "sum_then_normalize is right)"
        )
    if reward_weights is not None:
        weights = [float(w) for w in reward_weights]
        # TRL fills in a weight of 1 for each function it was given: then the functions are the problem, said below.
        filled = reward_functions is not None and len(weights) == len(reward_functions) and set(weights) == {1.0}
        if not filled and (len(weights) != 1 or not math.isclose(weights[0], 1.0, rel_tol=0.0, abs_tol=0.0)):
            problems.append(
                f"{where}.reward_weights is {weights}: the groupwise reward must enter TRL with weight 1 and alone; "
                f"{remove('reward_weights')}"
            )
    if reward_functions is not None and len(reward_functions) != 1:
        problems.append(
            f"the trainer has {len(reward_functions)} reward functions ({', '.join(reward_functions)}): TRL would add "
            "the others to the groupwise reward (an environment class that defines get_reward is one); the grader's "
            "reward function must be the only one"
        )
    return problems


_UNSET = object()

# Calls a Ray async actor (verl's reward worker) runs at once by default, and how many whileai plans for per worker:
# verl picks a worker at random for each response, so the busiest one gets more than its share.
RAY_ASYNC_ACTOR_CALLS = 1000
VERL_CALLS_PER_WORKER = 800


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def config_value(config: Any, dotted: str, default: Any = _UNSET) -> Any:
    """``config``'s value at ``dotted`` (``"algorithm.adv_estimator"``), through mappings (an OmegaConf
    ``DictConfig`` is one) and attributes (verl's config dataclasses); ``default`` (None unless given) when a part
    is missing."""
    node = config
    for part in dotted.split("."):
        if isinstance(node, Mapping):
            try:
                node = node.get(part, _UNSET)
            except Exception:  # an OmegaConf interpolation that does not resolve
                node = _UNSET
        else:
            node = getattr(node, part, _UNSET)
        if node is _UNSET:
            return None if default is _UNSET else default
    return node


def _true(value: Any) -> bool:
    """A config flag as verl reads it (``bool(value)``), with the strings a command line leaves ("false", "0")."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "0", "no", "off", "none", "null")
    return bool(value)


def verl_signal_problems(config: Any) -> list[str]:
    """What a verl config (the whole ``main_ppo`` config, as verl hands it to a reward manager) does that would move
    whileai's advantages off equation 3, or keep its reward manager from grading whole groups.

    A missing key is read as verl's default: ``adv_estimator`` is ``gae`` and ``norm_adv_by_std_in_grpo`` is true
    unless set, ``data.train_batch_size`` is 1024 and ``reward.num_workers`` 8, validation runs before training with
    ``val_kwargs.n`` 1.

    Returns:
        One sentence per problem, naming the setting and the override that fixes it; empty when verl trains on
        equation 3.

    Example:
        >>> verl_signal_problems({"algorithm": {"adv_estimator": "grpo"}})[0]
        "algorithm.norm_adv_by_std_in_grpo is True (verl's default when unset): verl would divide each group by its std and rescale the moved mass; set algorithm.norm_adv_by_std_in_grpo=False"
    """  # noqa: E501
    problems = _advantage_problems(config)
    if _true(config_value(config, "reward.reward_model.enable", False)):
        problems.append(
            "reward.reward_model.enable is True: a reward model is a second reward source beside the grader's "
            "reward (without reward.custom_reward_function.path verl scores with the model and skips the reward "
            "manager); set reward.reward_model.enable=False"
        )
    legacy = config_value(config, "custom_reward_function.path", None)
    if legacy is not None:
        problems.append(
            f"custom_reward_function.path is {legacy!r}: verl 0.9 reads the verifier from "
            "reward.custom_reward_function.path and ignores the top-level key, so its default scorer would run "
            "instead; move it to reward.custom_reward_function.path"
        )
    n = config_value(config, "actor_rollout_ref.rollout.n", None)
    size = n if isinstance(n, int) and not isinstance(n, bool) else None
    if size is None or size < 2:
        said = "is not set (verl's default is 1)" if n is None else f"is {n!r}"
        problems.append(
            f"actor_rollout_ref.rollout.n {said}: a group needs two or more responses to tell passes apart (verl "
            "gives a group of one its raw score as its advantage); set actor_rollout_ref.rollout.n to the group "
            "size"
        )
    validates = _true(config_value(config, "trainer.val_before_train", True))
    test_freq = config_value(config, "trainer.test_freq", -1)
    validates = validates or (isinstance(test_freq, int) and test_freq > 0)
    workers = config_value(config, "reward.num_workers", 8)
    if size is not None and size >= 2 and isinstance(workers, int) and not isinstance(workers, bool):
        problems += _worker_problems(config, size, workers, validates)
    val_n = config_value(config, "actor_rollout_ref.rollout.val_kwargs.n", 1)
    if size is not None and size >= 2 and validates and val_n != size:
        problems.append(
            f"actor_rollout_ref.rollout.val_kwargs.n is {val_n!r} while validation runs (trainer.val_before_train "
            "or trainer.test_freq > 0): verl tells a reward manager neither the phase nor the group size, so "
            f"validation responses would wait for groups of rollout.n={size} that never fill; set "
            f"actor_rollout_ref.rollout.val_kwargs.n={size}, or turn validation off "
            "(trainer.val_before_train=False trainer.test_freq=-1)"
        )
    return problems


def _advantage_problems(config: Any) -> list[str]:
    """What in verl's ``algorithm`` section would move its advantages off a group-mean subtraction of the reward."""
    problems: list[str] = []
    estimator = config_value(config, "algorithm.adv_estimator", None)
    name = getattr(estimator, "value", estimator)  # verl's AdvantageEstimator is a str enum
    if name == "grpo_vectorized":
        problems.append(
            "algorithm.adv_estimator is 'grpo_vectorized': verl calls it without norm_adv_by_std_in_grpo, so it "
            "always divides each group by its std; set algorithm.adv_estimator=grpo"
        )
    elif name != "grpo":
        said = "is not set (verl's default is 'gae')" if name is None else f"is {name!r}"
        problems.append(
            f"algorithm.adv_estimator {said}: verl would not subtract each group's mean reward, which equation 3 "
            "needs; set algorithm.adv_estimator=grpo"
        )
    norm = config_value(config, "algorithm.norm_adv_by_std_in_grpo", None)
    if norm is None or _true(norm):
        said = "is True (verl's default when unset)" if norm is None else f"is {norm!r}"
        problems.append(
            f"algorithm.norm_adv_by_std_in_grpo {said}: verl would divide each group by its std and rescale the "
            "moved mass; set algorithm.norm_adv_by_std_in_grpo=False"
        )
    if _true(config_value(config, "algorithm.use_kl_in_reward", False)):
        problems.append(
            "algorithm.use_kl_in_reward is True: verl would subtract a KL penalty from each response's reward "
            "before the advantage; keep the KL in the loss (actor_rollout_ref.actor.use_kl_loss=True) and set "
            "algorithm.use_kl_in_reward=False"
        )
    return problems


def _worker_problems(config: Any, size: int, workers: int, validates: bool) -> list[str]:
    """Whether the reward workers hold every response in flight at once: each waits on its worker for its group, and
    a worker runs ``RAY_ASYNC_ACTOR_CALLS`` calls at once; whileai plans ``VERL_CALLS_PER_WORKER``."""
    batch = max(
        _count(config_value(config, "data.train_batch_size", 1024)), _count(config_value(config, "data.gen_batch_size"))
    )
    mode = config_value(config, "trainer.v1.trainer_mode", "sync")
    in_flight = 1 + _count(config_value(config, f"trainer.v1.{mode}.num_warmup_batches", 0)) if mode != "sync" else 1
    counts = [
        (
            batch * size * in_flight,
            f"data.train_batch_size {batch} x rollout.n {size}"
            + (f" x {in_flight} batches in flight ({mode})" if in_flight > 1 else ""),
        )
    ]
    problems: list[str] = []
    if validates:
        val_batch = _count(config_value(config, "data.val_batch_size"))
        if not val_batch:
            problems.append(
                "data.val_batch_size is not set while validation runs: verl then validates the whole validation set "
                "at once, and every response waits on a reward worker for its group; set data.val_batch_size (or "
                "turn validation off: trainer.val_before_train=False trainer.test_freq=-1)"
            )
        else:
            counts.append((val_batch * size, f"data.val_batch_size {val_batch} x val_kwargs.n {size}"))
    for responses, what in counts:
        if workers < 1 or responses > VERL_CALLS_PER_WORKER * workers:
            needed = -(-responses // VERL_CALLS_PER_WORKER)
            problems.append(
                f"reward.num_workers is {workers} for {responses} responses at once ({what}): every response waits "
                f"on a reward worker for its group, and a worker runs {RAY_ASYNC_ACTOR_CALLS} calls at once (Ray's "
                f"default for an async actor), so the step could stall until group_wait_s; set "
                f"reward.num_workers={needed} or more"
            )
            break
    return problems
