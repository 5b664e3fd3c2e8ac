"""A fused CPU kernel for masked GAE: one backward pass per row, reading rewards, values and the mask once.

The vectorized torch scan of ``returns`` makes 13 passes over ``[B, T]`` (in cache); the recursion itself needs one.
When numba is installed (the ``fast`` extra), ``gae_native`` compiles that one pass (rows in parallel; it sets
numba's thread count to torch's on every call) and ``gae_advantages`` uses it for CPU tensors that need no gradient.
Everything else (CUDA tensors, inputs that require grad, numba missing, ``WHILEAI_NO_NATIVE=1``) takes the torch
path, which gives the same numbers to rounding (a test compares them).

The recursion is the chapter's Equation (7.1) with its token conventions: walking backward, a policy position gets
``delta = r + gamma * V_next - V`` and ``A = delta + gamma * lam * A_next``; a non-policy position gets 0 and passes
``V_next`` and ``A_next`` on unchanged (tool spans are not steps); after a row's last policy token both are 0.

Not here: any other estimator, any GPU kernel, any I/O.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from whileai.advantages.memory import reusable_output

__all__ = ["gae_native", "native_available"]

_KERNEL: Any = None
_FAILED = False


def _compile() -> Any:
    """The compiled kernel, or None when numba is missing or cannot compile here."""
    global _KERNEL, _FAILED
    if _KERNEL is not None or _FAILED:
        return _KERNEL
    try:
        import numba
    except ImportError:
        _FAILED = True
        return None

    def gae_rows(r, v, m, gamma, lam, adv, tgt):  # pragma: no cover - compiled; tested through gae_native
        rows, length = r.shape
        decay = gamma * lam
        for b in numba.prange(rows):
            next_value = 0.0
            next_advantage = 0.0
            for t in range(length - 1, -1, -1):
                if m[b, t]:
                    value = v[b, t]
                    advantage = r[b, t] + gamma * next_value - value + decay * next_advantage
                    adv[b, t] = advantage
                    tgt[b, t] = advantage + value
                    next_value = value
                    next_advantage = advantage
                else:
                    adv[b, t] = 0.0
                    tgt[b, t] = 0.0

    try:
        _KERNEL = numba.njit(parallel=True, fastmath=False, cache=True, nogil=True)(gae_rows)
    except Exception:  # no writable cache location, an unsupported platform: the torch scan serves
        _FAILED = True
    return _KERNEL


def native_available() -> bool:
    """Whether the fused kernel can run here (numba installed, not disabled by ``WHILEAI_NO_NATIVE``)."""
    return not os.environ.get("WHILEAI_NO_NATIVE") and _compile() is not None


def gae_native(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float, work: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Masked GAE in one fused pass on the CPU, or None when the torch path must run instead.

    Args:
        rewards, values: ``[B, T]``.
        mask: ``[B, T]`` policy mask.
        gamma, lam: checked discounts in ``[0, 1]``.
        work: float32 or float64, the dtype the computation runs in.

    Returns:
        ``(advantages, value_targets)`` as ``[B, T]`` tensors of dtype ``work``, or None. Their memory is this thread's
        previous outputs' when nothing holds those any more (``memory.reusable_output``).
    """
    if rewards.device.type != "cpu" or values.device.type != "cpu" or mask.device.type != "cpu":
        return None
    if torch.is_grad_enabled() and (rewards.requires_grad or values.requires_grad):
        return None
    if work not in (torch.float32, torch.float64) or not native_available():
        return None
    kernel = _compile()
    r = rewards.detach().to(work).contiguous()
    v = values.detach().to(work).contiguous()
    m = (mask if mask.dtype == torch.bool else mask != 0).contiguous()
    advantages = reusable_output(tuple(r.shape), work, r.device, "gae advantages")
    targets = reusable_output(tuple(r.shape), work, r.device, "gae targets")
    try:
        import numba

        numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
        kernel(r.numpy(), v.numpy(), m.numpy(), float(gamma), float(lam), advantages.numpy(), targets.numpy())
    except Exception:  # a numba that cannot compile on this platform: remember it and use torch
        global _FAILED, _KERNEL
        _FAILED, _KERNEL = True, None
        return None
    return advantages, targets
