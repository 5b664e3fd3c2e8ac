"""whileai.advantages: the advantage estimators of token batches with tool spans (the advantage-estimation chapter).

Importing this package imports torch (the ``train`` extra); ``import whileai`` does not import it.

- ``returns``: ``outcome_rewards``, ``returns_to_go``, ``td_errors``, ``nstep_returns``, ``gae_advantages``
  on ``[B, T]`` batches with a policy mask (7.1-7.3);
- ``groups``: ``group_advantages``, ``rloo_advantages``, ``group_center_batch_scale``, ``whiten``,
  ``zero_variance_fraction``, ``expected_group_push`` on ``[N]`` episode rewards in groups (7.5, 7.7);
- ``turns``: ``turn_advantages``, GAE with one step per call (7.6);
- ``critic``: ``make_critic``, ``critic_values``, ``fit_critic``, ``explained_variance`` (7.4);
- ``mdp``: a tabular MDP with exact values and ``sample_steps`` in the ``[B, T]`` layout (7.2);
- ``scan``: the policy-token compaction and the discounted reverse scan underneath ``returns`` and ``turns``;
- ``native``: the plain numba loops that serve GAE and the group baselines on the CPU when numba is installed.

Conventions: a reward lives on the policy token that earned it; time advances only on policy tokens; recursions
carry their state unchanged across mask-0 positions; outputs are 0 there and rewards and values there are never read
(NaN and inf included, on every device). The float32 scans keep float32's precision whatever the global matmul
setting (TF32).
"""

from __future__ import annotations

from whileai.errors import needs_extra

with needs_extra("train", "whileai.advantages"):
    import torch  # noqa: F401  (the estimators are torch code)

from whileai.advantages.critic import critic_values, explained_variance, fit_critic, make_critic
from whileai.advantages.groups import (
    STD_EPS,
    expected_group_push,
    group_advantages,
    group_center_batch_scale,
    rloo_advantages,
    whiten,
    zero_variance_fraction,
)
from whileai.advantages.mdp import Episodes, TabularMDP, exact_values, random_mdp, sample_steps, softmax_policy
from whileai.advantages.returns import gae_advantages, nstep_returns, outcome_rewards, returns_to_go, td_errors
from whileai.advantages.turns import turn_advantages

__all__ = [
    "STD_EPS",
    "Episodes",
    "TabularMDP",
    "critic_values",
    "exact_values",
    "expected_group_push",
    "explained_variance",
    "fit_critic",
    "gae_advantages",
    "group_advantages",
    "group_center_batch_scale",
    "make_critic",
    "nstep_returns",
    "outcome_rewards",
    "random_mdp",
    "returns_to_go",
    "rloo_advantages",
    "sample_steps",
    "softmax_policy",
    "td_errors",
    "turn_advantages",
    "whiten",
    "zero_variance_fraction",
]
