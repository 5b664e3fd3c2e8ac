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

Pure: no torch, no TRL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["signal_problems"]


def signal_problems(
    *,
    scale_rewards: Any,
    multi_objective_aggregation: Any = "sum_then_normalize",
    reward_weights: Sequence[float] | None = None,
    reward_functions: Sequence[str] | None = None,
) -> list[str]:
    """What a grader arm's configuration does to the reward besides TRL's group-mean subtraction.

    Args:
        scale_rewards: TRL's ``scale_rewards`` (``"none"`` or ``False`` is right).
        multi_objective_aggregation: TRL's aggregation (``"sum_then_normalize"`` is right).
        reward_weights: TRL's ``reward_weights`` (None or ``[1]`` is right).
        reward_functions: the names of the trainer's reward functions once built (one, the grader's, is right);
            None before the trainer exists.

    Returns:
        One sentence per problem, naming the setting and the fix; empty when the signal is equation 3.

    Example:
        >>> signal_problems(scale_rewards="group")
        ["trainer.scale_rewards is 'group': TRL would divide each group by its std and rescale the moved mass; set trainer.scale_rewards: none"]
    """  # noqa: E501
    problems: list[str] = []
    if scale_rewards not in ("none", False):
        problems.append(
            f"trainer.scale_rewards is {scale_rewards!r}: TRL would divide each group by its std and rescale the "
            "moved mass; set trainer.scale_rewards: none"
        )
    if multi_objective_aggregation != "sum_then_normalize":
        problems.append(
            f"trainer.multi_objective_aggregation is {multi_objective_aggregation!r}: TRL would normalize the "
            "reward by its std before the advantage; remove it (the default sum_then_normalize is right)"
        )
    if reward_weights is not None:
        weights = [float(w) for w in reward_weights]
        if len(weights) != 1 or not math.isclose(weights[0], 1.0, rel_tol=0.0, abs_tol=0.0):
            problems.append(
                f"trainer.reward_weights is {weights}: the groupwise reward must enter TRL with weight 1 and alone; "
                "remove reward_weights"
            )
    if reward_functions is not None and len(reward_functions) != 1:
        problems.append(
            f"the trainer has {len(reward_functions)} reward functions ({', '.join(reward_functions)}): TRL would add "
            "the others to the groupwise reward (an environment class that defines get_reward is one); the grader's "
            "reward function must be the only one"
        )
    return problems
