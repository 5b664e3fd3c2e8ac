"""Turn-level advantages: GAE with one step per call, shared by the call's tokens (section 7.6 of the chapter).

A turn is one call of the agent. By default the calls are the maximal runs of contiguous policy tokens (a tool
span, or any mask-0 position, ends a call); ``turn_ids`` can say otherwise, e.g. to keep a call that contains a
masked template token whole. whileai's choices, where the chapter leaves them open:

- the reward of a turn is the sum of the rewards on its tokens (its cost and, for the last call, the outcome);
- the value of a turn, ``V(s_k)``, is the value at the call's first token, the state in which the call began;
- ``delta_k = R_k + gamma * V(s_{k+1}) - V(s_k)`` and ``A_k = delta_k + gamma * lam * A_{k+1}``: gamma and lambda
  apply once per call, so a 50-turn episode at lambda 0.95 keeps 0.95**50 of the direct path, not 0.95**tokens;
- the turn's advantage and its value target ``A_k + V(s_k)`` are broadcast to every token of the call.

Values at tokens other than a call's first are never read. Not here: token-level GAE (``returns``).
"""

from __future__ import annotations

import torch

from whileai.advantages.returns import gae_packed
from whileai.advantages.scan import PolicyLayout, check_batch, check_discount, result_dtype, working_dtype

__all__ = ["turn_advantages"]


def turn_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    turn_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over turns, broadcast back to the turns' tokens.

    Args:
        rewards: ``[B, T]``, on policy tokens.
        values: ``[B, T]``; only the value at the first policy token of each turn is read.
        mask: ``[B, T]`` policy mask.
        gamma: discount per turn, in ``[0, 1]``.
        lam: GAE's lambda per turn, in ``[0, 1]``.
        turn_ids: optional ``[B, T]`` integer ids. A new turn starts at a policy token whose id differs from the
            previous policy token's id in the row (mask-0 positions between them are skipped). ``None``: calls are
            the contiguous policy spans.

    Returns:
        ``(advantages, value_targets)``, ``[B, T]`` in the rewards' dtype, constant over each turn's tokens and 0 at
        non-policy positions.

    Example (two calls; the first call's TD error bootstraps from the second call's first-token value, 0.6):
        >>> mask = torch.tensor([[1, 1, 0, 1, 1]])
        >>> r = torch.tensor([[0.0, -0.1, 0, 0, 1.0]])
        >>> v = torch.tensor([[0.5, 7.0, 9, 0.6, 7.0]])
        >>> turn_advantages(r, v, mask, lam=0.0)[0]
        tensor([[0.0000, 0.0000, 0.0000, 0.4000, 0.4000]])
    """
    check_batch("rewards", rewards, mask)
    check_batch("values", values, mask)
    gamma = check_discount("gamma", gamma)
    lam = check_discount("lam", lam)
    layout = PolicyLayout(mask)
    work = working_dtype(rewards, values)
    r = layout.pack(rewards, work)  # [B, W]
    v = layout.pack(values, work)  # [B, W]
    rows, width = r.shape
    slots = torch.arange(width, device=r.device)  # [W]
    valid = slots < layout.counts[:, None]  # [B, W], a real policy token
    if turn_ids is None:
        positions = torch.arange(mask.shape[1], device=mask.device).expand(mask.shape)  # [B, T]
        key = layout.pack(positions, torch.int64) - slots  # [B, W], constant along a contiguous span
    else:
        check_batch("turn_ids", turn_ids, mask)
        key = layout.pack(turn_ids.to(torch.int64), torch.int64)  # [B, W]
    start = valid.clone()  # [B, W], first token of a turn
    start[:, 1:] &= key[:, 1:] != key[:, :-1]
    turn = start.cumsum(1, dtype=torch.int32).to(torch.int64) - 1  # [B, W], turn index of each token
    turns = int(start.sum(1).max()) if rows else 0  # K, the most turns in a row
    turn.masked_fill_(~valid, turns)  # padding slots go to the scratch column K
    turn_rewards = r.new_zeros((rows, turns + 1)).scatter_add_(1, turn, r)  # [B, K+1]
    turn_values = v.new_zeros((rows, turns + 1)).scatter_(1, turn.masked_fill(~start, turns), v)  # [B, K+1]
    turn_rewards[:, turns] = 0
    turn_values[:, turns] = 0
    advantages, targets = gae_packed(turn_rewards, turn_values, gamma, lam)  # [B, K+1] each, V(s_K) = 0
    advantages[:, turns] = 0
    targets[:, turns] = 0
    dtype = result_dtype(rewards)
    per_token = torch.gather(advantages, 1, turn), torch.gather(targets, 1, turn)  # [B, W] each
    return layout.unpack(per_token[0], dtype), layout.unpack(per_token[1], dtype)
