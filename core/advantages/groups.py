"""Critic-free baselines from groups of attempts at the same task (sections 7.5 and 7.7 of the chapter).

Rewards come as ``[N]`` laid out as consecutive groups of ``group_size`` attempts at one task (episodes
``0..G-1`` are task 0, ``G..2G-1`` task 1, ...), one scalar per episode. Every function is a reshape to
``[N/G, G]`` and a few reductions: no Python loop over groups.

- ``group_advantages``: GRPO's mean baseline, divided by the group's std (``"group"``), by the std of the whole
  batch's rewards (``"batch"``, TRL's ``scale_rewards="batch"``) or not at all (``"none"``, Dr. GRPO).
- ``rloo_advantages``: the leave-one-out baseline, ``G/(G-1) * (R - mean)``.
- ``group_center_batch_scale``: 7.7's option (b), centered in the group and scaled by the batch std of the centered
  advantages.
- ``whiten``: batch whitening, masked.
- ``zero_variance_fraction`` and ``expected_group_push``: the diagnostics of 7.5 and 7.7.

The standard deviations are sample standard deviations (Bessel's correction), as ``torch.std`` and TRL compute
them. Every division adds ``STD_EPS = 1e-4`` to the standard deviation, TRL's GRPO convention, so a zero-variance
group gets advantage 0 and not NaN. Broadcasting an episode's advantage to its tokens is the caller's
``adv[:, None] * mask``. No I/O.

On the CPU, torch is slow at what groups of 8 need: a sum over a last axis of 8 and a broadcast back over it each take
several elementwise passes' time. With numba installed (the ``fast`` extra), float32 and float64 rewards on the CPU
that need no gradient go through ``native.centered_native``, one plain compiled loop over the groups; everything else
(CUDA, inputs that require grad, numba missing, ``WHILEAI_NO_NATIVE=1``) takes the torch path below. Both give the
same numbers to float32 rounding, a group of equal rewards exactly 0, and a NaN reward NaN in its own group and
nowhere else (tests compare them).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from whileai.advantages.native import centered_native

__all__ = [
    "STD_EPS",
    "expected_group_push",
    "group_advantages",
    "group_center_batch_scale",
    "rloo_advantages",
    "whiten",
    "zero_variance_fraction",
]

# Added to every standard deviation before dividing by it (TRL GRPOTrainer: ``advantages / (std + 1e-4)``).
STD_EPS = 1e-4


def _group_size(rewards: torch.Tensor, group_size: int) -> int:
    """``group_size`` as an int, once it is checked to split ``rewards`` ``[N]`` into whole groups."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be [N], got shape {tuple(rewards.shape)}")
    if int(group_size) != group_size or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size}")
    if rewards.shape[0] % group_size:
        raise ValueError(f"{rewards.shape[0]} rewards do not split into groups of {group_size}")
    return int(group_size)


def _work(rewards: torch.Tensor) -> torch.Tensor:
    """The rewards in the dtype the estimators compute in: float64 stays, anything else becomes float32."""
    return rewards if rewards.dtype in (torch.float32, torch.float64) else rewards.to(torch.float32)


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    return _work(rewards).view(-1, _group_size(rewards, group_size))  # [N/G, G]


def _compiled(
    rewards: torch.Tensor, group_size: int, factor: float = 1.0, std_eps: float | None = None
) -> torch.Tensor | None:
    """The numba loop's answer (``native.centered_native``) in the rewards' dtype, or None where the torch path runs."""
    out = centered_native(_work(rewards), group_size, factor=factor, std_eps=std_eps)
    return out if out is None or out.dtype == rewards.dtype else _out(out, rewards)


def _center(grouped: torch.Tensor) -> torch.Tensor:
    """``R - mean_group`` as a new tensor: ``[N/G, G]`` -> ``[N/G, G]``.

    Each group is shifted by its first reward before it is summed, as the numba loop does: a group of equal rewards then
    centers to exactly 0 at any size (a float32 sum of 5 copies of 123.456 is not 5 times it), and the centered values
    keep their digits when the rewards share a large offset. An infinite first reward is no shift (``inf - inf``
    would turn the group's finite rewards to NaN).
    """
    shift = torch.nan_to_num(grouped[:, :1], nan=0.0, posinf=0.0, neginf=0.0)  # [N/G, 1]
    shifted = grouped - shift  # [N/G, G]
    return shifted.sub_(shifted.sum(1, keepdim=True).div_(grouped.shape[1]))


def _out(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1).to(like.dtype if like.is_floating_point() else torch.get_default_dtype())


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale: Literal["group", "batch", "none"] = "group"
) -> torch.Tensor:
    """GRPO's group-mean advantage ``A_i = (R_i - mean_group) / (std + 1e-4)`` (section 7.5).

    Args:
        rewards: ``[N]``, consecutive groups of ``group_size``.
        group_size: attempts per task, ``G``; ``G >= 2`` whenever a std is taken.
        scale: ``"group"`` divides by each group's sample std (GRPO, TRL's default); ``"batch"`` by the sample std
            of all ``N`` rewards (TRL's ``scale_rewards="batch"``); ``"none"`` does not divide (Dr. GRPO).

    Returns:
        ``[N]`` advantages in the rewards' dtype.

    Example (one success in eight: +0.875 / -0.125 centered, x2.83 with the group std):
        >>> r = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
        >>> group_advantages(r, 8, scale="none")[:2]
        tensor([ 0.8750, -0.1250])
        >>> group_advantages(r, 8)[:2]
        tensor([ 2.4742, -0.3535])
    """
    group_size = _group_size(rewards, group_size)
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    if group_size < 2 and scale == "group":
        raise ValueError("a group std needs group_size >= 2")
    if scale == "group":
        compiled = _compiled(rewards, group_size, std_eps=STD_EPS)
        if compiled is not None:
            return compiled
    grouped = _groups(rewards, group_size)  # [N/G, G]
    if scale == "batch":
        # Of the rewards shifted by the first one, as each group is centered (``_center``): a large common offset then
        # costs the float32 std no digits.
        shifted = grouped - torch.nan_to_num(grouped[:1, :1], nan=0.0, posinf=0.0, neginf=0.0)  # [N/G, G]
        std = shifted.std() if grouped.numel() > 1 else grouped.new_zeros(())  # []
    if scale != "group":
        # With a batch std on the CPU the numba loop multiplies by its inverse (float(std) would wait for a GPU).
        factor = 1.0 / (float(std) + STD_EPS) if scale == "batch" and grouped.device.type == "cpu" else 1.0
        compiled = _compiled(rewards, group_size, factor=factor)  # None off the CPU
        if compiled is not None:
            return compiled
    centered = _center(grouped)  # [N/G, G]
    if scale == "none":
        return _out(centered, rewards)
    if scale == "group":
        # Bessel-corrected std from the centered values, summed explicitly: torch.std over a tiny inner dim is
        # several times slower on CPU.
        std = centered.square().sum(1, keepdim=True).div_(group_size - 1).sqrt_()  # [N/G, 1]
    return _out(centered.div_(std + STD_EPS), rewards)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Leave-one-out advantages ``A_i = R_i - mean_{j != i} R_j = G/(G-1) * (R_i - mean)`` (section 7.5).

    Unbiased: the baseline of episode ``i`` uses only the other ``G - 1``, independent of it.

    Args:
        rewards: ``[N]``, consecutive groups of ``group_size >= 2``.
        group_size: attempts per task.

    Returns:
        ``[N]`` advantages in the rewards' dtype.

    Example:
        >>> rloo_advantages(torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0]), 8)[:2]
        tensor([ 1.0000, -0.1429])
    """
    group_size = _group_size(rewards, group_size)
    if group_size < 2:
        raise ValueError("RLOO needs group_size >= 2")
    factor = group_size / (group_size - 1)
    compiled = _compiled(rewards, group_size, factor=factor)
    if compiled is not None:
        return compiled
    return _out(_center(_groups(rewards, group_size)).mul_(factor), rewards)


def group_center_batch_scale(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Center within each group, then divide by the batch's std of the centered values (section 7.7, option b).

    Keeps the within-task comparison of group centering and a unit step size across the batch, without the
    per-group difficulty weighting of the group std. Unlike ``group_advantages(scale="batch")`` (TRL's), the scale
    is the std of ``R - mean_group``, not of ``R``: the spread between tasks' pass rates does not shrink it.

    Args:
        rewards: ``[N]``, consecutive groups of ``group_size``.
        group_size: attempts per task.

    Returns:
        ``[N]`` in the rewards' dtype, sample std 1 over the batch (up to ``STD_EPS``) unless every group is flat.

    Example:
        >>> group_center_batch_scale(torch.tensor([1.0, 0, 1, 1]), 2)
        tensor([ 1.2244, -1.2244,  0.0000,  0.0000])
    """
    grouped = _groups(rewards, group_size)  # [N/G, G]
    compiled = centered_native(grouped.view(-1), group_size)
    centered = _center(grouped) if compiled is None else compiled.view(grouped.shape)  # [N/G, G]
    std = centered.std() if centered.numel() > 1 else centered.new_zeros(())  # []
    return _out(centered / (std + STD_EPS), rewards)


def whiten(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Batch whitening ``(x - mean) / (std + 1e-4)`` over the entries selected by ``mask`` (all when ``None``).

    Mean and sample std are taken over the selected entries only; unselected entries are never read (NaN or inf
    there changes nothing) and come back as 0. Applied to episode rewards ``[N]`` this is the batch whitening that 7.7
    compares with group centering; applied to token advantages ``[B, T]`` with the policy mask it is PPO's advantage
    whitening.

    Args:
        x: any shape, e.g. ``[N]`` or ``[B, T]``.
        mask: same shape as ``x`` (bool or numeric), or ``None``.

    Returns:
        Same shape and dtype as ``x``.

    Example:
        >>> whiten(torch.tensor([1.0, 2.0, 3.0, 100.0]), torch.tensor([1, 1, 1, 0]))
        tensor([-0.9999,  0.0000,  0.9999,  0.0000])
    """
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    values = x.to(work)
    if mask is None:
        count = torch.tensor(values.numel(), dtype=work, device=values.device)
        centered = values - values.sum() / count.clamp(min=1)
    else:
        if mask.shape != x.shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} differs from x {tuple(x.shape)}")
        keep = mask != 0
        values = torch.where(keep, values, 0.0)  # selected, never multiplied by the mask: NaN * 0 is NaN
        count = keep.sum().to(work)
        centered = torch.where(keep, values - values.sum() / count.clamp(min=1), 0.0)
    var = centered.square().sum() / (count - 1).clamp(min=1)  # [], Bessel-corrected
    out = centered / (var.sqrt() + STD_EPS)
    return out.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())


def zero_variance_fraction(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Fraction of episodes whose group has zero variance (all rewards equal), which carry no gradient (7.5, 7.7).

    Groups are equal-sized, so this is also the fraction of groups.

    Args:
        rewards: ``[N]``, consecutive groups of ``group_size``.
        group_size: attempts per task.

    Returns:
        0-dim float tensor in ``[0, 1]``.

    Example:
        >>> zero_variance_fraction(torch.tensor([0.0, 0, 1, 0, 1, 1]), 2)
        tensor(0.6667)
    """
    grouped = _groups(rewards, group_size)  # [N/G, G]
    flat = grouped.amax(1) == grouped.amin(1)  # [N/G]
    return flat.to(grouped.dtype).mean()


def expected_group_push(p: float | torch.Tensor, group_size: int, normalize: bool) -> float | torch.Tensor:
    """Expected total absolute advantage of a group for a task of pass rate ``p``, exact from the binomial (7.5).

    With ``k`` successes in ``G`` binary attempts, the mean-centered advantages sum in absolute value to
    ``2k(G-k)/G``; with ``normalize`` each is divided by the group's sample std plus ``STD_EPS``, exactly as
    ``group_advantages(scale="group")`` does. The expectation sums over ``k ~ Binomial(G, p)``.

    Args:
        p: pass rate(s) in ``[0, 1]``, a float or a tensor of any shape.
        group_size: ``G >= 2``.
        normalize: divide by the group std (GRPO) or not (Dr. GRPO).

    Returns:
        A float for a float ``p``, else a float64 tensor shaped like ``p``.

    Example (the difficulty-bias ratio of 7.5 at p = 0.1, G = 8):
        >>> round(expected_group_push(0.1, 8, True) / expected_group_push(0.1, 8, False), 2)
        2.49
    """
    if group_size < 2:
        raise ValueError("group_size must be >= 2")
    probs = torch.as_tensor(p, dtype=torch.float64)
    if ((probs < 0) | (probs > 1)).any():
        raise ValueError("pass rates must lie in [0, 1]")
    g = int(group_size)
    k = torch.arange(g + 1, dtype=torch.float64)  # [G+1]
    log_comb = torch.tensor(
        [math.lgamma(g + 1) - math.lgamma(i + 1) - math.lgamma(g - i + 1) for i in range(g + 1)], dtype=torch.float64
    )
    # Binomial pmf without 0 * log(0): xlogy gives 0 for the k = 0 and k = G ends at p = 0 or 1.
    p_ = probs[..., None]  # [..., 1]
    log_pmf = log_comb + torch.special.xlogy(k, p_) + torch.special.xlogy(g - k, 1 - p_)  # [..., G+1]
    push = 2 * k * (g - k) / g  # [G+1]
    if normalize:
        std = torch.sqrt(k * (g - k) / (g * (g - 1)))  # [G+1], sample std of k ones and G-k zeros
        push = push / (std + STD_EPS)
    out = (log_pmf.exp() * push).sum(-1)  # [...]
    return float(out) if not isinstance(p, torch.Tensor) else out
