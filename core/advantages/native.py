"""Fused CPU kernels: masked GAE in one backward pass per row, and group baselines in one pass per group.

The vectorized torch scan of ``returns`` makes 13 passes over ``[B, T]`` (in cache); the recursion itself needs one.
When numba is installed (the ``fast`` extra), ``gae_native`` compiles that one pass (rows in parallel; it sets
numba's thread count to torch's on every call) and ``gae_advantages`` uses it for CPU tensors that need no gradient.
Everything else (CUDA tensors, inputs that require grad, numba missing, ``WHILEAI_NO_NATIVE=1``) takes the torch
path, which gives the same numbers to rounding (a test compares them).

The recursion is the chapter's Equation (7.1) with its token conventions: walking backward, a policy position gets
``delta = r + gamma * V_next - V`` and ``A = delta + gamma * lam * A_next``; a non-policy position gets 0 and passes
``V_next`` and ``A_next`` on unchanged (tool spans are not steps); after a row's last policy token both are 0.

``centered_native`` serves ``groups`` the same way: torch spends 3 to 5 elementwise passes' time on each sum over a
last axis of 8 and on each broadcast back over it, where the group baselines need one read of each reward and one
write of each advantage. Its kernel (compiled per group size) computes each group's mean, and its sample std when asked,
and writes ``(R - mean) * factor`` or ``(R - mean) * 1/(std + eps)`` (within an ulp of the torch path's division) in
one pass, on the calling thread (sharing the groups among 2 threads with ``prange`` halved the kernel's time on idle
cores, gained nothing measurable in ``bench_advantages.py``, and made it 20 to 50 times slower while other processes
kept the cores busy). Every group is shifted by its first reward before it is summed, so a group of equal rewards
gives exactly 0 at any size, and a NaN or infinite reward gives what the torch path gives (NaN, or -inf and NaN, in
its own group and nowhere else).

Not here: any other estimator, any GPU kernel, any I/O.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from whileai.advantages.memory import reusable_output

__all__ = ["centered_native", "gae_native", "native_available"]

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


# Groups per block of the group kernel: their rewards, transposed, are 8 KiB of float32 scratch for groups of 8
# (32 and 128 groups measured slower, 256 slower still). Capped at 64 KiB of scratch for large groups.
_LANES = 64
_SCRATCH = 2**16

_GROUP_KERNELS: dict[int, Any] = {}

# The kernel's dtypes, with the numpy scalar type its constants are passed as.
_NUMPY_SCALARS = {torch.float32: np.float32, torch.float64: np.float64}


def _group_kernel(group_size: int) -> Any:
    """The compiled group kernel for ``group_size`` (one per size: the size is a compile-time constant), or None
    when numba is missing or cannot compile here."""
    if group_size not in _GROUP_KERNELS:
        kernel = None
        if _compile() is not None:  # numba imported and usable
            import numba

            try:
                kernel = numba.njit(error_model="numpy", cache=True, nogil=True)(_group_rows(group_size))
            except Exception:  # no writable cache location, an unsupported platform: the torch path serves
                kernel = None
        _GROUP_KERNELS[group_size] = kernel
    return _GROUP_KERNELS[group_size]


def _group_rows(size: int) -> Any:
    """The group kernel for groups of ``size``.

    numba does not vectorize the work within one small group (8 floats need shuffles, which only its disabled SLP
    vectorizer would emit), so the kernel works on blocks of ``lanes`` groups transposed into a ``[size, lanes]``
    scratch: the statistics of a block are then plain vector arithmetic across its groups, and only the two
    transpositions (into the scratch and back out) move data between lanes. Measured 1.8 times (groups of 8) and 3 times
    (groups of 16) faster than vectorizing the loop over groups directly, where the compiler gathers the members.
    """
    lanes = max(1, min(_LANES, _SCRATCH // (8 * size)))

    def group_rows(rewards, out, std, factor, eps):  # pragma: no cover - compiled; tested through centered_native
        zero = eps - eps  # 0, 1, 1/G and 1/(G-1) in the rewards' dtype: float32 arithmetic stays float32
        one = zero + np.float32(1)
        per_member = one / (zero + np.float32(size))
        per_dof = one / (zero + np.float32(max(size - 1, 1)))
        block = np.empty((size, lanes), rewards.dtype)  # [G, lanes], member j of group l at [j, l]
        padded = np.zeros(2 * lanes * size, rewards.dtype)  # the last, partial block's rewards and advantages
        groups = rewards.shape[0] // size
        for start in range(0, groups, lanes):
            # Always lanes groups (a constant trip count: the compiler's loops need no remainder); a partial last
            # block is padded with groups of zeros.
            width = min(lanes, groups - start)
            given = rewards[start * size : (start + width) * size]  # [width * G]
            written = out[start * size : (start + width) * size]
            if width < lanes:
                padded[: width * size] = given
                given, written = padded[: lanes * size], padded[lanes * size :]
            for lane in range(lanes):
                for j in range(size):
                    block[j, lane] = given[lane * size + j]
            for lane in range(lanes):
                # Shifted by the group's first reward: a group of equal rewards sums to exactly 0. An infinite first
                # reward is not a shift (inf - inf would make the whole group NaN).
                shift = block[0, lane]
                shift = shift if shift - shift == zero else zero
                total = zero
                for j in range(size):
                    total += block[j, lane] - shift
                mean = total * per_member  # of the shifted rewards
                scale = factor
                if std:
                    squares = zero
                    for j in range(size):
                        centered = (block[j, lane] - shift) - mean
                        squares += centered * centered
                    scale = one / (np.sqrt(squares * per_dof) + eps)
                for j in range(size):
                    block[j, lane] = ((block[j, lane] - shift) - mean) * scale
            for lane in range(lanes):
                for j in range(size):
                    written[lane * size + j] = block[j, lane]
            if width < lanes:
                out[start * size :] = written[: width * size]

    return group_rows


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
        or None. Its memory is this thread's previous output's when nothing holds that any more
        (``memory.reusable_output``).
    """
    scalar = _NUMPY_SCALARS.get(rewards.dtype)
    if scalar is None or not rewards.is_cpu or rewards.dim() != 1:
        return None
    if (rewards.requires_grad and torch.is_grad_enabled()) or os.environ.get("WHILEAI_NO_NATIVE"):
        return None
    kernel = _group_kernel(group_size)
    if kernel is None:
        return None
    given = rewards.detach() if rewards.requires_grad else rewards
    x = (given if given.is_contiguous() else given.contiguous()).numpy()
    out = reusable_output(x.shape, rewards.dtype, rewards.device, "group advantages")
    std, eps = std_eps is not None, scalar(0.0 if std_eps is None else std_eps)
    try:
        kernel(x, out.numpy(), std, scalar(factor), eps)
    except Exception:  # a numba that cannot compile on this platform: remember it and use torch
        _GROUP_KERNELS[group_size] = None
        return None
    return out
