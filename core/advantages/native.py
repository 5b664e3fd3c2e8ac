"""Two plain numba loops for the CPU: masked GAE one position a step, and group-centered rewards one group at a time.

The torch paths of ``returns`` and ``groups`` pay for their generality on the CPU: GAE packs the policy tokens and
runs a chunked scan (a handful of passes over ``[B, T]``), and a sum over a last axis of 8 costs torch several
elementwise passes' time. A compiled loop reads each input once and writes each output once. When numba is installed
(the ``fast`` extra), ``gae_advantages`` and the group estimators call these loops for CPU tensors that need no
gradient; everything else (CUDA tensors, inputs that require grad, numba missing, ``WHILEAI_NO_NATIVE=1``) takes the
torch path, which gives the same numbers to rounding (tests compare both paths with float64 references).

- ``gae_native``: Equation (7.1) with the chapter's token conventions, walking each row backward: a policy position
  gets ``delta = r + gamma * V_next - V`` and ``A = delta + gamma * lam * A_next``; a non-policy position gets 0 and
  passes ``V_next`` and ``A_next`` on unchanged (tool spans are not steps), so rewards and values there are never read;
  after a row's last policy token both are 0. The recursion runs in float64 whatever the inputs' dtype.
- ``centered_native``: each group's mean, and its sample std when asked, then ``(R - mean) * factor`` or
  ``(R - mean) / (std + eps)``, in the rewards' dtype. Every group is shifted by its first reward before it is summed,
  as the torch path does, so a group of equal rewards gives exactly 0, and a NaN or infinite reward gives what the
  torch path gives (NaN, or -inf and NaN, in its own group and nowhere else).

Both loops run on the calling thread. Not here: any other estimator, any GPU kernel, any I/O.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

__all__ = ["centered_native", "gae_native", "native_available"]

# The compiled loops, (gae_rows, centered_rows), once numba has been tried; None when it is missing or cannot compile.
_KERNELS: tuple[Any, Any] | None = None
_TRIED = False

# The dtypes the loops take, with the numpy scalar type their constants are passed as.
_NUMPY_SCALARS = {torch.float32: np.float32, torch.float64: np.float64}


def gae_rows(r, v, m, gamma, lam, adv, tgt):  # pragma: no cover - compiled; tested through gae_native
    """Masked GAE backward along each row of ``[B, T]`` rewards ``r``, values ``v`` and mask ``m``, into ``adv`` and
    ``tgt`` (advantages and value targets)."""
    decay = gamma * lam
    for b in range(r.shape[0]):
        rewards, values, policy, advantages, targets = r[b], v[b], m[b], adv[b], tgt[b]  # [T] views of row b
        next_value = 0.0
        next_advantage = 0.0
        for t in range(r.shape[1] - 1, -1, -1):
            if policy[t]:
                advantage = rewards[t] + gamma * next_value - values[t] + decay * next_advantage
                advantages[t] = advantage
                targets[t] = advantage + values[t]
                next_value = values[t]
                next_advantage = advantage
            else:
                advantages[t] = 0.0
                targets[t] = 0.0


def centered_rows(rewards, out, std, factor, eps):  # pragma: no cover - compiled; tested through centered_native
    """Each row of ``[N/G, G]`` rewards centered on its mean, times ``factor`` or divided by its sample std plus
    ``eps`` (when ``std``), into ``out``; the arithmetic in the rewards' dtype (``factor`` and ``eps`` are given in
    it)."""
    groups, size = rewards.shape
    zero = eps - eps
    one = zero + np.float32(1)
    members = zero + np.float32(size)  # small integers are exact in float32, and so in either dtype
    dof = zero + np.float32(max(size - 1, 1))
    for g in range(groups):
        # Shifted by the group's first reward: a group of equal rewards sums to exactly 0. An infinite first reward
        # is no shift (inf - inf would make the group's finite rewards NaN).
        shift = rewards[g, 0]
        if shift - shift != zero:
            shift = zero
        total = zero
        for j in range(size):
            total += rewards[g, j] - shift
        mean = total / members  # of the shifted rewards
        scale = factor
        if std:
            squares = zero
            for j in range(size):
                centered = (rewards[g, j] - shift) - mean
                squares += centered * centered
            scale = one / (np.sqrt(squares / dof) + eps)
        for j in range(size):
            out[g, j] = ((rewards[g, j] - shift) - mean) * scale


def _kernels() -> tuple[Any, Any] | None:
    """The compiled loops, or None when numba is missing or cannot compile here."""
    global _KERNELS, _TRIED
    if not _TRIED:
        _TRIED = True
        try:
            import numba

            # cache=True: compiled once per machine (numba's cache), not once per process.
            compile_loop = numba.njit(cache=True, nogil=True, error_model="numpy")
            # reassoc lets LLVM vectorize the two sums over a group (it may add a group's members in any order); it
            # implies no finite-math assumption, so NaN and inf propagate as written.
            compile_sums = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
            _KERNELS = compile_loop(gae_rows), compile_sums(centered_rows)
        except Exception:  # numba missing, no writable cache location, an unsupported platform: torch serves
            _KERNELS = None
    return _KERNELS


def _enabled_kernels() -> tuple[Any, Any] | None:
    """The compiled loops, or None when they cannot run or ``WHILEAI_NO_NATIVE`` is set."""
    return None if os.environ.get("WHILEAI_NO_NATIVE") else _kernels()


def native_available() -> bool:
    """Whether the loops can run here (numba installed, not disabled by ``WHILEAI_NO_NATIVE``)."""
    return _enabled_kernels() is not None


def _failed() -> None:
    """A numba that cannot compile a signature on this platform: remember it, and let torch serve from now on."""
    global _KERNELS
    _KERNELS = None


def gae_native(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float, work: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Masked GAE in one backward pass per row on the CPU, or None when the torch path must run instead.

    Args:
        rewards, values: ``[B, T]``.
        mask: ``[B, T]`` policy mask.
        gamma, lam: checked discounts in ``[0, 1]``.
        work: float32 or float64, the dtype of the outputs.

    Returns:
        ``(advantages, value_targets)`` as ``[B, T]`` tensors of dtype ``work``, 0 at non-policy positions; or None.
    """
    if rewards.device.type != "cpu" or values.device.type != "cpu" or mask.device.type != "cpu":
        return None
    if torch.is_grad_enabled() and (rewards.requires_grad or values.requires_grad):
        return None
    kernels = _enabled_kernels()
    if work not in _NUMPY_SCALARS or kernels is None:
        return None
    r = rewards.detach().to(work).contiguous()  # [B, T]
    v = values.detach().to(work).contiguous()  # [B, T]
    m = (mask if mask.dtype == torch.bool else mask != 0).contiguous()  # [B, T]
    advantages = torch.empty_like(r)  # [B, T]
    targets = torch.empty_like(r)  # [B, T]
    try:
        kernels[0](r.numpy(), v.numpy(), m.numpy(), float(gamma), float(lam), advantages.numpy(), targets.numpy())
    except Exception:
        _failed()
        return None
    return advantages, targets


def centered_native(
    rewards: torch.Tensor, group_size: int, factor: float = 1.0, std_eps: float | None = None
) -> torch.Tensor | None:
    """Group-centered rewards in one pass on the CPU, or None when the torch path must run instead.

    Args:
        rewards: ``[N]`` float32 or float64, consecutive groups of ``group_size`` (the caller checked the split).
        group_size: ``G``, the members of a group.
        factor: what the centered rewards are multiplied by when ``std_eps`` is None: 1 to center, ``G/(G-1)`` for
            RLOO, ``1/(std + eps)`` of a batch std.
        std_eps: when given, each group is divided by its sample std plus this instead (GRPO's ``scale="group"``).

    Returns:
        ``[N]`` in the rewards' dtype, ``(R - mean_group) * factor`` or ``(R - mean_group) / (std_group + std_eps)``;
        or None.
    """
    scalar = _NUMPY_SCALARS.get(rewards.dtype)
    if scalar is None or not rewards.is_cpu or rewards.dim() != 1:
        return None
    kernels = _enabled_kernels()
    if (rewards.requires_grad and torch.is_grad_enabled()) or kernels is None:
        return None
    x = rewards.detach().contiguous().numpy().reshape(-1, group_size)  # [N/G, G]
    out = np.empty_like(x)  # [N/G, G]
    std, eps = std_eps is not None, scalar(0.0 if std_eps is None else std_eps)
    try:
        kernels[1](x, out, std, scalar(factor), eps)
    except Exception:
        _failed()
        return None
    return torch.from_numpy(out.reshape(-1))
