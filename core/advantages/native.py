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
kept the cores busy). Group sizes that are a multiple of 8 up to 128 (TRL's default of 8 among them) run in a kernel in
LLVM vector IR (``_vector_block``: 8 groups side by side, transposed in registers); any other size runs a loop that
transposes blocks of groups through a scratch array (``_group_rows``). Every group is shifted by its first reward
before it is summed, so a group of equal rewards gives exactly 0 at any size, and a NaN or infinite reward gives what
the torch path gives (NaN, or -inf and NaN, in its own group and nowhere else).

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
        decay2 = decay * decay
        for b in numba.prange(rows):
            next_value = 0.0
            next_advantage = 0.0
            t = length - 1
            if length % 2:  # an odd row's last position alone; pairs from there
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
                t -= 1
            # Two positions a step, t and s = t - 1, without branches: each is computed as if it were a policy
            # position and selected by its mask. The earlier one's advantage is written from next_advantage directly,
            # ``e + c * next_advantage`` (two decays when t is a step, one when t passes it on), so the chain from one
            # pair to the next is one multiply and one add where one position a step had two of each.
            while t > 0:
                policy_t = m[b, t]
                policy_s = m[b, t - 1]
                value_t = v[b, t]
                value_s = v[b, t - 1]
                delta_t = r[b, t] + gamma * next_value - value_t
                next_value_s = value_t if policy_t else next_value
                delta_s = r[b, t - 1] + gamma * next_value_s - value_s
                advantage_t = delta_t + decay * next_advantage
                e = delta_s + decay * delta_t if policy_t else delta_s
                c = decay2 if policy_t else decay
                advantage_s = e + c * next_advantage
                adv[b, t] = advantage_t if policy_t else 0.0
                tgt[b, t] = advantage_t + value_t if policy_t else 0.0
                adv[b, t - 1] = advantage_s if policy_s else 0.0
                tgt[b, t - 1] = advantage_s + value_s if policy_s else 0.0
                next_advantage = advantage_s if policy_s else (advantage_t if policy_t else next_advantage)
                next_value = value_s if policy_s else next_value_s
                t -= 2

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


# Groups per block of the transposing loop: their rewards, transposed, are 8 KiB of float32 scratch for groups of 8
# (32 and 128 groups measured slower, 256 slower still, when groups of 8 ran here; they run in the vector kernel
# now). Capped at 64 KiB of scratch for large groups.
_LANES = 64
_SCRATCH = 2**16

# Lanes of the vector kernel: 8 groups side by side, one per lane of a 256-bit float32 vector.
_WIDTH = 8
# Largest group the vector kernel takes: its code is straight-line per block of 8 groups, so its size (and compile
# time, seconds at 128) grows with the group's. Measured several times faster than the transposing loop up to here
# (commit 15b46a8 has the figures).
_MAX_VECTOR_GROUP = 128

_GROUP_KERNELS: dict[int, Any] = {}

# The kernel's dtypes, with the numpy scalar type its constants are passed as.
_NUMPY_SCALARS = {torch.float32: np.float32, torch.float64: np.float64}


def _group_kernel(group_size: int) -> Any:
    """The compiled group kernel for ``group_size`` (one per size: the size is a compile-time constant), or None
    when numba is missing or cannot compile here: the vector kernel for multiples of 8 up to 128, the transposing
    loop for any other size."""
    if group_size not in _GROUP_KERNELS:
        kernel = None
        if _compile() is not None:  # numba imported and usable
            import numba

            vector = group_size % _WIDTH == 0 and group_size <= _MAX_VECTOR_GROUP
            try:
                rows = _vector_rows(group_size) if vector else _group_rows(group_size)
                kernel = numba.njit(error_model="numpy", cache=True, nogil=True)(rows)
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


def _vector_rows(size: int) -> Any:
    """The group kernel for groups of ``size``, a multiple of 8, written as LLVM vector code (``_vector_block``).

    It runs over blocks of 8 groups; a partial last block is copied into zero-padded scratch, run, and copied back.
    Same results as ``_group_rows`` but for the order of the group sum (a tree here, a left-to-right sum there).
    Its closure holds ints only, so numba's on-disk cache finds it again in the next process.
    """
    _vector_block()  # the intrinsic, a module global the kernel is typed against
    span = _WIDTH * size  # rewards per block

    def group_rows(rewards, out, std, factor, eps):  # pragma: no cover - compiled; tested through centered_native
        n = rewards.shape[0]
        full = n - n % span
        if std:
            for base in range(0, full, span):
                _BLOCK(rewards, out, base, factor, eps, size, True)
        else:
            for base in range(0, full, span):
                _BLOCK(rewards, out, base, factor, eps, size, False)
        if full < n:
            given = np.zeros(span, rewards.dtype)  # the rest, then groups of zeros (they center to 0)
            written = np.empty(span, rewards.dtype)
            given[: n - full] = rewards[full:]
            if std:
                _BLOCK(given, written, 0, factor, eps, size, True)
            else:
                _BLOCK(given, written, 0, factor, eps, size, False)
            out[full:] = written[: n - full]

    return group_rows


# The intrinsic of _vector_block, built on first use (numba is an optional dependency).
_BLOCK: Any = None


def _vector_block() -> Any:
    """The numba intrinsic ``block(rewards, out, base, factor, eps, size, std)`` that writes the advantages of the 8
    groups of ``size`` starting at element ``base``; ``size`` (a multiple of 8) and ``std`` must be compile-time
    constants.

    Why LLVM IR: numba's compiler neither vectorizes within a group (its SLP vectorizer is off) nor across groups
    without gathering the members one by one, which cost the transposing loop of ``_group_rows`` most of its time. Here
    each group's rewards are loaded as vectors of 8, transposed in registers (three stages of two-vector shuffles) so
    that lane ``l`` of vector ``j`` holds member ``j`` of group ``l``, and the statistics of the 8 groups are computed
    side by side: the shift (the group's first reward when finite), the mean of the shifted rewards (a tree of adds),
    the sample std and ``1/(std + eps)`` with one vector square root. The advantages are
    ``((R - shift) - mean) * scale``, the scalar kernel's arithmetic. Groups of 8 in float32 compute them side by side
    and transpose them back; larger groups and float64 compute them from the rows as loaded, with each group's shift,
    mean and scale broadcast from a small stack buffer. Each way was the faster one measured for its case.

    ``bench_advantages.py`` times it beside ``_group_rows`` on the same arrays (its table of where a GRPO and an RLOO
    call spend their time).
    """
    global _BLOCK
    if _BLOCK is not None:
        return _BLOCK
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    lanes = _WIDTH
    i32 = ir.IntType(32)

    def mask(indices: list[int]) -> Any:
        return ir.Constant(ir.VectorType(i32, len(indices)), indices)

    def swap_transpose(builder: Any, rows: list[Any]) -> list[Any]:
        """The transpose of a square of vectors (``rows[i][k]`` -> ``out[k][i]``): at each stage the off-diagonal
        blocks of ``half`` by ``half`` lanes of rows ``i`` and ``i + half`` change places. For 64-bit elements, whose
        vector of 8 is two registers: the first stage only swaps registers."""
        rows, half = list(rows), lanes // 2
        while half:
            low = mask([k if not k & half else lanes + k - half for k in range(lanes)])
            high = mask([k + half if not k & half else lanes + k for k in range(lanes)])
            for i in range(lanes):
                if not i & half:
                    a, b = rows[i], rows[i + half]
                    rows[i], rows[i + half] = builder.shuffle_vector(a, b, low), builder.shuffle_vector(a, b, high)
            half //= 2
        return rows

    def unpack_transpose(builder: Any, rows: list[Any]) -> list[Any]:
        """The same transpose of 8 vectors of 8 (its masks are written for 8 lanes) for 32-bit elements, one 256-bit
        register each, in three steps that x86 has one instruction for: interleave pairs of rows within 128-bit halves
        (``unpcklps``), then pairs of those in 64-bit units (``unpcklpd``/``shufps``), then join 128-bit halves
        (``vperm2f128``). 24 shuffles; ``swap_transpose`` costs 32 here (its single-element step takes two each)."""

        def shuffle(a: Any, b: Any, indices: list[int]) -> Any:
            return builder.shuffle_vector(a, b, mask(indices))

        low, high = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
        pairs = []  # pairs[2i], pairs[2i+1]: rows 2i and 2i+1 interleaved
        for i in range(0, lanes, 2):
            pairs += [shuffle(rows[i], rows[i + 1], low), shuffle(rows[i], rows[i + 1], high)]
        even, odd = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
        quads = []  # quads[q], quads[q + 4]: members q and q + 4 of rows 0-3, then of rows 4-7
        for i in (0, 4):
            quads += [
                shuffle(pairs[i], pairs[i + 2], even),
                shuffle(pairs[i], pairs[i + 2], odd),
                shuffle(pairs[i + 1], pairs[i + 3], even),
                shuffle(pairs[i + 1], pairs[i + 3], odd),
            ]
        first, second = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
        return [shuffle(quads[j], quads[j + 4], first) for j in range(4)] + [
            shuffle(quads[j], quads[j + 4], second) for j in range(4)
        ]

    def tree_sum(builder: Any, terms: list[Any]) -> Any:
        while len(terms) > 1:
            pairs = [builder.fadd(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
            terms = pairs + terms[len(pairs) * 2 :]
        return terms[0]

    @intrinsic
    def block(typingctx, rewards, out, base, factor, eps, size_type, std_type):  # pragma: no cover - compiled
        size, std = getattr(size_type, "literal_value", None), getattr(std_type, "literal_value", None)

        def codegen(context, builder, signature, args):
            rewards_value, out_value, base_value, factor_value, eps_value = args[:5]
            rows_per_group = size // lanes
            array = signature.args[0]
            element = context.get_value_type(array.dtype)
            vector = ir.VectorType(element, lanes)
            align = context.get_abi_sizeof(element)
            read = context.make_array(array)(context, builder, rewards_value).data
            write = context.make_array(signature.args[1])(context, builder, out_value).data

            def at(data: Any, offset: int) -> Any:  # a <lanes x element>* at element base + offset
                pointer = builder.gep(data, [builder.add(base_value, ir.Constant(base_value.type, offset))])
                return builder.bitcast(pointer, vector.as_pointer())

            def splat(scalar: Any) -> Any:
                one = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar, ir.Constant(i32, 0))
                return builder.shuffle_vector(one, one, mask([0] * lanes))

            def constant(value: float) -> Any:
                return splat(ir.Constant(element, value))

            loaded = []  # loaded[l][k]: members 8k .. 8k+7 of group l
            for group in range(lanes):
                loaded.append(
                    [builder.load(at(read, group * size + k * lanes), align=align) for k in range(rows_per_group)]
                )
            narrow = array.dtype.bitwidth == 32
            transpose = unpack_transpose if narrow else swap_transpose
            members = []  # members[j]: member j of every group of the block
            for k in range(rows_per_group):
                members += transpose(builder, [loaded[group][k] for group in range(lanes)])
            zero = constant(0.0)
            first = members[0]
            finite = builder.fcmp_ordered("==", builder.fsub(first, first), zero)
            shift = builder.select(finite, first, zero)  # an infinite or NaN first reward is no shift
            shifted = [builder.fsub(member, shift) for member in members]
            mean = builder.fmul(tree_sum(builder, shifted), constant(1.0 / size))
            if std:
                centered = [builder.fsub(x, mean) for x in shifted]
                squares = tree_sum(builder, [builder.fmul(x, x) for x in centered])
                variance = builder.fmul(squares, constant(1.0 / max(size - 1, 1)))
                name = f"llvm.sqrt.v{lanes}{'f32' if array.dtype.bitwidth == 32 else 'f64'}"
                root = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]), name)
                scale = builder.fdiv(constant(1.0), builder.fadd(builder.call(root, [variance]), splat(eps_value)))
            else:
                scale = splat(factor_value)
            if narrow and rows_per_group == 1:
                # Groups of 8 in float32: the advantages computed side by side and transposed back, 24 shuffles
                # against about 40 for the 24 broadcasts below. Measured faster only here: larger groups' twice as
                # many vectors no longer fit the 16 registers, and float64's vectors of 8 are two registers each.
                advantages = transpose(builder, [builder.fmul(builder.fsub(x, mean), scale) for x in shifted])
                for group in range(lanes):
                    builder.store(advantages[group], at(write, group * size), align=align)
                return context.get_dummy_value()
            # Each group's shift, mean and scale, read back one lane at a time as broadcasts. The buffer is an array
            # of scalars, aligned for one: the vector stores say so (without it LLVM assumes a vector's alignment,
            # and an unoptimized build, NUMBA_OPT=0, crashed on the aligned store).
            stats = cgutils.alloca_once(builder, ir.ArrayType(element, 3 * lanes))
            for k, value in enumerate((shift, mean, scale)):
                slot = builder.gep(stats, [ir.Constant(i32, 0), ir.Constant(i32, k * lanes)])
                builder.store(value, builder.bitcast(slot, vector.as_pointer()), align=align)

            def lane(k: int, group: int) -> Any:
                return splat(
                    builder.load(builder.gep(stats, [ir.Constant(i32, 0), ir.Constant(i32, k * lanes + group)]))
                )

            for group in range(lanes):
                group_shift, group_mean, group_scale = lane(0, group), lane(1, group), lane(2, group)
                for k in range(rows_per_group):
                    value = builder.fsub(builder.fsub(loaded[group][k], group_shift), group_mean)
                    builder.store(builder.fmul(value, group_scale), at(write, group * size + k * lanes), align=align)
            return context.get_dummy_value()

        supported = (types.float32, types.float64)
        if not (
            isinstance(rewards, types.Array)
            and rewards.dtype in supported
            and isinstance(out, types.Array)
            and out.dtype == rewards.dtype
            and rewards.ndim == out.ndim == 1
            and isinstance(base, types.Integer)
            and factor == eps == rewards.dtype
            and isinstance(size_type, types.IntegerLiteral)
            and isinstance(std_type, types.BooleanLiteral)
            and size > 0
            and size % lanes == 0
        ):
            return None
        return types.void(rewards, out, base, factor, eps, size_type, std_type), codegen

    _BLOCK = block
    return block


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
    if (rewards.requires_grad and torch.is_grad_enabled()) or os.environ.get("WHILEAI_NO_NATIVE"):
        return None
    kernel = _group_kernel(group_size)
    if kernel is None:
        return None
    given = rewards.detach() if rewards.requires_grad else rewards
    x = (given if given.is_contiguous() else given.contiguous()).numpy()
    # A fresh array, not memory.reusable_output. Measured once on float32 groups of 8: faster up to 262,144 episodes
    # (1 MiB: the allocator serves it from its cache, and the reuse check cost more than the page faults it would
    # save), slower from millions of episodes on, sizes no GRPO batch reaches.
    out = np.empty_like(x)
    std, eps = std_eps is not None, scalar(0.0 if std_eps is None else std_eps)
    try:
        kernel(x, out, std, scalar(factor), eps)
    except Exception:  # a numba that cannot compile on this platform: remember it and use torch
        _GROUP_KERNELS[group_size] = None
        return None
    return torch.from_numpy(out)
