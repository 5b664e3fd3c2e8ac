"""Token-level estimators on ``[B, T]`` batches with a policy mask: outcome rewards, returns-to-go, TD errors,
n-step returns and GAE (sections 7.1 to 7.3 of the advantage-estimation chapter).

The chapter's conventions hold everywhere:

- a reward lives on the policy token that earned it (``outcome_rewards`` builds that layout);
- time advances only on policy tokens: every recursion carries its state unchanged across positions whose mask is 0
  (prompt, template, tool tokens), and gamma is applied once per policy token;
- outputs are 0 at non-policy positions, and rewards and values there are never read: a garbage value, NaN and inf
  included, changes nothing, on the CPU kernel and on the torch path alike (they are selected, never multiplied by
  the mask, since ``NaN * 0`` is NaN);
- the value after a row's last policy token is 0 (the episode is over).

Inputs may be any float dtype on any device; the computation runs in float32 (float64 when an input is float64) and
returns the rewards' dtype. Each estimator packs every row's policy tokens to the left (``scan.PolicyLayout``) and
runs its recursion there as one vectorized scan (``scan.discounted_reverse_scan``), so a 30,000-token row costs no
Python step per token; the scan's matrix products keep their dtype's precision whatever the global float32 matmul
setting (TF32 on CUDA, bfloat16 on oneDNN). On the CPU, with numba installed, GAE runs as one compiled backward loop
per row instead (``native.gae_native``, its recursion in float64), for inputs that need no gradient.

Not here: group baselines (``groups``), turn-level credit (``turns``), critics (``critic``). No I/O.
"""

from __future__ import annotations

import torch

from whileai.advantages.native import gae_native
from whileai.advantages.scan import (
    PolicyLayout,
    check_batch,
    check_discount,
    discounted_reverse_scan,
    result_dtype,
    working_dtype,
)

__all__ = ["gae_advantages", "nstep_returns", "outcome_rewards", "returns_to_go", "td_errors"]


def _add_next(r: torch.Tensor, v: torch.Tensor, gamma: float) -> torch.Tensor:
    """``r[:, k] += gamma * v[:, k+1]`` in place (nothing is added to the last column): ``[B, L]``."""
    r[:, :-1].add_(v[:, 1:], alpha=gamma)
    return r


def outcome_rewards(
    scores: torch.Tensor, mask: torch.Tensor, call_costs: float | torch.Tensor | None = None
) -> torch.Tensor:
    """Place each episode's score on its last policy token, and an optional cost on the last token of every call.

    A call is a maximal run of contiguous policy tokens; its last token is where its cost is charged (section 7.1).

    Args:
        scores: ``[N]`` episode outcomes.
        mask: ``[N, T]`` policy mask (bool or numeric).
        call_costs: ``None``, a float, or ``[N]``: subtracted on the last token of each call of the row.

    Returns:
        ``[N, T]`` rewards in the scores' float dtype, 0 on every other position. Rows without a policy token get
        all zeros (their score has nowhere to go).

    Example (the hand-built row of 7.1: calls of 2, 2 and 1 tokens between tool spans of 3 and 2):
        >>> mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]])
        >>> outcome_rewards(torch.tensor([1.0]), mask, call_costs=0.1)
        tensor([[ 0.0000, -0.1000,  0.0000,  0.0000,  0.0000,  0.0000, -0.1000,  0.0000,  0.0000,  0.9000]])
    """
    if scores.dim() != 1 or mask.dim() != 2 or mask.shape[0] != scores.shape[0]:
        raise ValueError(f"scores must be [N] and mask [N, T], got {tuple(scores.shape)} and {tuple(mask.shape)}")
    dtype = result_dtype(scores)
    policy = mask if mask.dtype == torch.bool else mask != 0  # [N, T]
    rows, length = policy.shape
    rewards = torch.zeros((rows, length), dtype=dtype, device=scores.device)  # [N, T]
    if length == 0:
        return rewards
    if call_costs is not None:
        ends = policy & ~torch.nn.functional.pad(policy[:, 1:], (0, 1))  # [N, T], last token of each call
        costs = torch.as_tensor(call_costs, dtype=dtype, device=scores.device)
        costs = costs[:, None] if costs.dim() == 1 else costs  # [N, 1] or scalar
        rewards = torch.where(ends, -costs, rewards)  # [N, T]; where, not ends * costs: 0 * inf would be NaN
    positions = torch.arange(length, device=policy.device)  # [T]
    last = torch.where(policy, positions, -1).amax(1)  # [N], -1 when the row has no policy token
    has_policy = last >= 0  # [N]
    rows_with = torch.arange(rows, device=policy.device)[has_policy]
    rewards[rows_with, last[has_policy]] += scores[has_policy].to(dtype)
    return rewards


def returns_to_go(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """The discounted return from each policy token onward, ``G_i = r_i + gamma * G_nx(i)`` (section 7.1).

    ``nx(i)`` is the next policy position after ``i``: the running sum is carried unchanged across mask-0 positions
    and gamma is applied once per policy token, so a tool span between two calls costs no discount.

    Args:
        rewards: ``[B, T]``, on policy tokens (values at mask-0 positions are ignored).
        mask: ``[B, T]`` policy mask.
        gamma: discount per policy token, in ``[0, 1]``.

    Returns:
        ``[B, T]`` returns in the rewards' dtype, 0 at non-policy positions.

    Example (7.1's row: the first call's return is 0.7 at gamma 1; at gamma 0.9 position 1 holds
    0.475 = -0.1 + 0.9 * 0.639, with 0.639 the return at position 5):
        >>> mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]])
        >>> r = outcome_rewards(torch.tensor([1.0]), mask, call_costs=0.1)
        >>> returns_to_go(r, mask)[0, :2]
        tensor([0.7000, 0.7000])
        >>> returns_to_go(r, mask, gamma=0.9)[0, [1, 5]]
        tensor([0.4751, 0.6390])
    """
    check_batch("rewards", rewards, mask)
    gamma = check_discount("gamma", gamma)
    layout = PolicyLayout(mask)
    work = working_dtype(rewards)
    packed = discounted_reverse_scan(layout.pack(rewards, work), gamma)  # [B, W]
    return layout.unpack(packed, result_dtype(rewards))


def td_errors(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """One-step TD errors ``delta_i = r_i + gamma * V(c_nx(i)) - V(c_i)`` on policy tokens (section 7.2).

    ``V(c_nx(i))`` is the value at the next policy position, skipping any tool span, and 0 after the last one.

    Args:
        rewards: ``[B, T]``.
        values: ``[B, T]``, ``V(c_i)`` at each policy position ``i``; entries at mask-0 positions are ignored.
        mask: ``[B, T]`` policy mask.
        gamma: discount per policy token, in ``[0, 1]``.

    Returns:
        ``[B, T]`` TD errors in the rewards' dtype, 0 at non-policy positions.

    Example (the next value is 0.6 at position 3, not the 9 of the tool position between):
        >>> mask = torch.tensor([[1, 0, 0, 1]])
        >>> td_errors(torch.tensor([[-0.1, 0, 0, 1.0]]), torch.tensor([[0.4, 9, 9, 0.6]]), mask)
        tensor([[0.1000, 0.0000, 0.0000, 0.4000]])
    """
    check_batch("rewards", rewards, mask)
    check_batch("values", values, mask)
    gamma = check_discount("gamma", gamma)
    layout = PolicyLayout(mask)
    work = working_dtype(rewards, values)
    r = layout.pack(rewards, work)  # [B, W]
    v = layout.pack(values, work)  # [B, W]
    delta = _add_next(r, v, gamma).sub_(v)  # [B, W]
    return layout.unpack(delta, result_dtype(rewards))


def nstep_returns(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, n: int, gamma: float = 1.0
) -> torch.Tensor:
    """n-step returns ``G_i^(n) = sum_{k<n} gamma^k r_{i_k} + gamma^n V(c_{i_n})`` on policy tokens (section 7.2).

    ``i_k`` is the k-th policy position after ``i``. When the episode ends before ``n`` steps the sum stops there
    and bootstraps from 0, so ``n >= T`` gives the return-to-go and ``n = 1`` gives ``r_i + gamma * V(c_nx(i))``.

    Computed from the discounted suffix sums ``S`` as ``S_i - gamma^n S_{i_n} + gamma^n V_{i_n}``, in float64 so the
    difference of two long sums keeps its digits.

    Args:
        rewards: ``[B, T]``.
        values: ``[B, T]``, read at policy positions only.
        mask: ``[B, T]`` policy mask.
        n: steps of real reward before bootstrapping, ``n >= 1``.
        gamma: discount per policy token, in ``[0, 1]``.

    Returns:
        ``[B, T]`` in the rewards' dtype, 0 at non-policy positions.

    Example:
        >>> mask = torch.tensor([[1, 0, 1, 1]])
        >>> nstep_returns(torch.tensor([[1.0, 0, 2.0, 3.0]]), torch.tensor([[0.0, 9, 10.0, 20.0]]), mask, n=1)
        tensor([[11.,  0., 22.,  3.]])
    """
    check_batch("rewards", rewards, mask)
    check_batch("values", values, mask)
    gamma = check_discount("gamma", gamma)
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    n = int(n)
    layout = PolicyLayout(mask)
    r = layout.pack(rewards, torch.float64)  # [B, W]
    v = layout.pack(values, torch.float64)  # [B, W]
    suffix = discounted_reverse_scan(r, gamma)  # [B, W]
    decay = gamma**n
    out = suffix.add_(layout.next_in_row(v, n).sub_(layout.next_in_row(suffix, n)), alpha=decay)  # [B, W]
    return layout.unpack(out, result_dtype(rewards))


def gae_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over policy tokens, Equation (7.1) of the chapter.

    ``A_i = delta_i + gamma * lam * A_nx(i)`` with ``delta_i = r_i + gamma * V(c_nx(i)) - V(c_i)``: both the next
    value and the running advantage are carried across tool spans, never read from them. ``lam = 1`` gives the
    return-to-go minus the value (unbiased for any critic); ``lam = 0`` gives the TD error.

    Args:
        rewards: ``[B, T]``, on policy tokens.
        values: ``[B, T]``, ``V(c_i)`` at policy positions; entries elsewhere are ignored, even NaN or inf.
        mask: ``[B, T]`` policy mask.
        gamma: discount per policy token, in ``[0, 1]``.
        lam: GAE's lambda, in ``[0, 1]``.

    Returns:
        ``(advantages, value_targets)``, both ``[B, T]`` in the rewards' dtype and 0 at non-policy positions;
        ``value_targets = advantages + values`` on policy tokens (the critic's regression target).

    Example (7.3's lambda = 0 anchor on 7.1's row: position 1 bootstraps from V(c5) = 0.6, not the 9 at position 2):
        >>> mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]])
        >>> r = outcome_rewards(torch.tensor([1.0]), mask, call_costs=0.1)
        >>> v = torch.tensor([[0.5, 0.4, 9, 9, 9, 0.6, 0.7, 9, 9, 0.8]])
        >>> gae_advantages(r, v, mask, lam=0.0)[0][0, 1]
        tensor(0.1000)
    """
    check_batch("rewards", rewards, mask)
    check_batch("values", values, mask)
    gamma = check_discount("gamma", gamma)
    lam = check_discount("lam", lam)
    work = working_dtype(rewards, values)
    dtype = result_dtype(rewards)
    fused = gae_native(rewards, values, mask, gamma, lam, work)  # one pass on the CPU when numba is installed
    if fused is not None:
        return fused[0].to(dtype), fused[1].to(dtype)
    layout = PolicyLayout(mask)
    r = layout.pack(rewards, work)  # [B, W]
    v = layout.pack(values, work)  # [B, W]
    advantages, targets = gae_packed(r, v, gamma, lam)
    return layout.unpack(advantages, dtype), layout.unpack(targets, dtype)


def gae_packed(r: torch.Tensor, v: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE on a dense block whose steps are all real: ``[B, L]`` rewards and values in, two ``[B, L]`` out.

    Each row's steps are followed by zeros up to and including the last column (the episode is over), so the next
    value is the next column. Consumes ``r`` and ``v``: the TD errors, then the value targets, are written into them.
    """
    delta = _add_next(r, v, gamma).sub_(v)  # [B, L]
    advantages = discounted_reverse_scan(delta, gamma * lam)  # [B, L]
    return advantages, v.add_(advantages)
