"""The two primitives every masked estimator is built on: policy-token compaction and a discounted reverse scan.

The chapter's convention (section 7.1) is that time advances only on policy tokens: a recursion carries its state
unchanged across prompt, template and tool positions. Rather than stepping through every position, the estimators
gather each row's policy tokens to the left (``PolicyLayout.pack``), run their recursion on that dense ``[B, L]``
block, and put the results back where the tokens came from (``PolicyLayout.unpack``), with 0 everywhere else.

``discounted_reverse_scan`` solves ``y[k] = x[k] + g * y[k+1]`` on the dense block without a Python step per token:
chunks of ``C`` tokens are summed with one matrix product against the ``C x C`` matrix of powers ``g**(j-k)``, and
the chunk heads, one per chunk, are linked by the same scan with ``g**C``, recursively. Every power lies in
``[0, 1]``, so nothing overflows at any length or any ``g`` in ``[0, 1]`` (a cumsum of ``x * g**-k`` would overflow
after a few hundred tokens at ``g = 0.855``).

``chained_reverse_scan`` solves the same recursion with a decay that varies per step, ``y[n] = x[n] + d[n] * y[n+1]``
with every ``d`` in ``[lo, 1]``: it links the chunk heads of ``returns``' unpacked GAE, whose per-chunk decays depend on
how many policy tokens each chunk holds. Within a group of ``G`` steps it rescales by the running product ``P`` of the
decays (``y[k] = sum_j P[j] x[j] / P[k]``), which stays above ``lo**G``: ``G`` is the widest of 64, 32, 16, 8, 4 that
keeps it above ``2**-100`` in float32 (a long first level of float32 input) or ``2**-600`` in float64; rows short
enough are solved with one small triangular matrix. A chain of a few thousand heads costs its ops' fixed cost more than
their arithmetic, so it makes few: two levels for a CPU block of 16 rows of 32,768 tokens at ``gamma * lambda = 0.94``.
The unpacked GAE (``returns.gae_advantages``) uses it and packs nothing; the other estimators still pack with
``PolicyLayout``.

The matrix products run at the full precision of their dtype whatever the global float32 matmul setting
(``full_precision_matmul``): with TF32 allowed (``torch.backends.cuda.matmul.allow_tf32``, TRL's ``tf32: true``,
``torch.set_float32_matmul_precision("high")``) cuBLAS rounds float32 inputs to 10 bits of mantissa, and a float32
GAE over 30,000 tokens at ``gamma = lambda = 1`` would be off by about 1% of ``|A|``. Where that setting is on, the
float32 products run in float64 instead, and the unpacked GAE's chunk sums (``suffix_sums``) as cumulative sums.
Nothing global is switched (only read), so no other thread sees a change and torch's check against mixing its legacy
and per-backend precision switches never fires.

Garbage never meets a product: ``PolicyLayout.pack`` selects the policy tokens and zeroes every other column, and
``zero_outside`` (like the unpacked GAE's integer product of the bit patterns with the mask's 0 or 1) selects without
a floating-point product, so a NaN or inf at a tool position never becomes ``NaN * 0`` (NaN) in a chunk's sum.

This module does not know about rewards, values or groups; ``returns``, ``turns`` and ``groups`` do.
"""

from __future__ import annotations

import torch

__all__ = [
    "PolicyLayout",
    "chained_reverse_scan",
    "discounted_reverse_scan",
    "float32_matmul_is_exact",
    "full_precision_matmul",
    "keep_bits",
    "lower_ones",
    "suffix_sums",
    "working_dtype",
    "zero_outside",
]

# Tokens per chunk of the scan. 32 keeps the chunk product cheap (2 * 32 flops per element) and the recursion
# shallow (3 levels at 30,000 tokens). Measured on 2 CPU cores: 32 beats 64 and 128 by 2x and 4x.
_CHUNK = 32


def working_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype the estimators compute in: float64 if any input is float64, float32 otherwise.

    float16 and bfloat16 are upcast because a 30,000-token sum in 8 bits of mantissa is noise.

    Example:
        >>> working_dtype(torch.zeros(2, dtype=torch.bfloat16))
        torch.float32
    """
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


# The integer type of each float type's width, for selecting on the bits.
_SAME_WIDTH_INT = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def keep_bits(keep: torch.Tensor, dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """The selection mask of ``zero_outside`` for ``dtype``: -1 (every bit set) where ``keep`` is True, 0 elsewhere,
    in the integer type of ``dtype``'s width. Computed once, it serves several selections of the same mask.

    Args:
        keep: bool tensor.
        dtype: the floating dtype of the tensors to select from.
        out: optional destination (an integer view of a work buffer, so no fresh memory is touched).

    Example:
        >>> keep_bits(torch.tensor([True, False]), torch.float32)
        tensor([-1,  0], dtype=torch.int32)
    """
    as_int = _SAME_WIDTH_INT[dtype]
    out = torch.empty(keep.shape, dtype=as_int, device=keep.device) if out is None else out
    return out.copy_(keep).neg_()


def zero_outside(x: torch.Tensor, keep: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` where ``keep`` is True and +0.0 elsewhere, whatever ``x`` holds there: ``torch.where(keep, x, 0)``.

    Never ``x * keep``: a NaN or inf at a dropped entry would make NaN. The selection runs on the bits, ``x & -keep``
    (``keep_bits``), which gives ``torch.where``'s result exactly and is vectorized: torch's CPU ``where`` is not, and
    takes 3 to 20 times longer on a ``[16, 32768]`` block (torch 2.13, one core). A tensor that requires grad goes
    through ``torch.where``, which is differentiable (the gradient of a dropped entry is 0).

    Args:
        x: floating tensor.
        keep: bool tensor of ``x``'s shape, or its ``keep_bits`` for ``x``'s dtype.
        out: optional destination of ``x``'s shape and dtype.

    Returns:
        The selection, in ``out`` when given.

    Example:
        >>> zero_outside(torch.tensor([1.0, float("nan"), -float("inf")]), torch.tensor([True, False, False]))
        tensor([1., 0., 0.])
    """
    if x.requires_grad and torch.is_grad_enabled():
        keep = keep if keep.dtype == torch.bool else keep != 0
        return torch.where(keep, x, 0.0) if out is None else torch.where(keep, x, x.new_zeros(()), out=out)
    bits = keep_bits(keep, x.dtype) if keep.dtype == torch.bool else keep
    as_int = bits.dtype
    selected = torch.bitwise_and(x.view(as_int), bits, out=None if out is None else out.view(as_int))
    return selected.view(x.dtype) if out is None else out


def float32_matmul_is_exact(device: torch.device) -> bool:
    """Whether a float32 matrix product on ``device`` keeps float32's 24-bit mantissa under the global settings.

    TRL's ``tf32: true`` (transformers sets ``torch.backends.fp32_precision = "tf32"`` on torch >= 2.9,
    ``torch.backends.cuda.matmul.allow_tf32 = True`` before), ``torch.backends.cuda.matmul.fp32_precision = "tf32"``
    and ``torch.set_float32_matmul_precision("high")`` or ``"medium"`` let cuBLAS round float32 inputs to TF32's
    10-bit mantissa; on the CPU they let oneDNN use TF32 or bfloat16 on processors that have them (counted as inexact
    on any CPU: this does not probe the hardware). It reads the per-backend setting (torch >= 2.9, which the legacy
    switches also set) and writes nothing, so it neither races with other threads nor trips torch's check against
    mixing the two APIs; older torch has one global setting. Other device types have no such switch: exact.

    Example:
        >>> float32_matmul_is_exact(torch.device("cpu"))  # torch's default, "highest"
        True
    """
    backend = {"cuda": torch.backends.cuda, "cpu": torch.backends.mkldnn}.get(device.type)
    if backend is None:
        return True
    # getattr with a default: the attribute is missing before torch 2.9 (its getter raises AttributeError).
    precision = getattr(getattr(backend, "matmul", None), "fp32_precision", None)
    if precision is None:
        return torch.get_float32_matmul_precision() == "highest"
    return precision in ("ieee", "none")  # "none": nothing set at any level, float32 itself


def full_precision_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` at the full precision of its dtype: float32 operands go through float64 where TF32 or bfloat16
    could round them (``float32_matmul_is_exact``), so the global matmul setting never changes an estimator.

    Args:
        a: ``[..., M, K]``.
        b: ``[K, N]`` or ``[..., K, N]``, the same dtype.

    Returns:
        ``[..., M, N]`` in the operands' dtype.

    Example:
        >>> full_precision_matmul(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]]))
        tensor([[11.]])
    """
    if a.dtype != torch.float32 or float32_matmul_is_exact(a.device):
        return a @ b
    return (a.to(torch.float64) @ b.to(torch.float64)).to(torch.float32)  # float64 products are never rounded


def discounted_reverse_scan(x: torch.Tensor, g: float) -> torch.Tensor:
    """Solve ``y[:, k] = x[:, k] + g * y[:, k+1]`` backward along the last axis, with ``y[:, L] = 0``.

    Args:
        x: ``[B, L]`` floating tensor, dense (no mask: compact the policy tokens first).
        g: the discount per step, in ``[0, 1]``.

    Returns:
        ``[B, L]`` tensor of the same dtype, ``y[:, k] = sum_{j >= k} g**(j-k) * x[:, j]``.

    O(L) memory and O(32 L) flops, in ``log_32 L`` vectorized levels; no Python step per element.

    Example:
        >>> discounted_reverse_scan(torch.tensor([[1.0, 1.0, 1.0]]), 0.5)
        tensor([[1.7500, 1.5000, 1.0000]])
    """
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"the discount must lie in [0, 1], got {g}")
    rows, length = x.shape
    if length == 0:
        return x.clone()
    chunk = min(_CHUNK, length)
    n_chunks = -(-length // chunk)
    padded = n_chunks * chunk
    if padded != length:
        x = torch.nn.functional.pad(x, (0, padded - length))  # [B, n*C]
    steps = torch.arange(chunk, device=x.device, dtype=torch.float64)
    lag = steps[:, None] - steps[None, :]  # [C, C], lag[j, k] = j - k
    # weights[j, k] = g**(j-k) for j >= k: token j's contribution to the sum at token k of the same chunk.
    weights = torch.where(lag >= 0, torch.tensor(g, dtype=torch.float64) ** lag.clamp(min=0), 0.0).to(x.dtype)
    local = full_precision_matmul(x.reshape(rows, n_chunks, chunk), weights)  # [B, n, C]
    if n_chunks > 1:
        heads = discounted_reverse_scan(local[:, :, 0], g**chunk)  # [B, n], the full sum at each chunk's start
        after = torch.nn.functional.pad(heads[:, 1:], (0, 1))  # [B, n], the full sum at the next chunk's start
        to_end = (torch.tensor(g, dtype=torch.float64) ** (chunk - steps)).to(x.dtype)  # [C], g**(C-k)
        local.addcmul_(after[:, :, None], to_end)  # [B, n, C]
    return local.view(rows, padded)[:, :length]


# The smallest running product of decays ``chained_reverse_scan`` divides by (float64: 1/x stays far from overflow and
# x * 2**-600 far from the subnormals for any |x| above 1e-120).
_TINY64 = 2.0**-600
_TINY32 = 2.0**-60  # the same for float32 (its subnormals start at 2**-126)
# The same bound for a float32 group of chunk heads: a product down to 2**-100 keeps every term's absolute error below
# 2**-149 / 2**-100 (1e-15) after the division, and lets one level of 64 heads cover gamma * lam >= 0.934 (one level
# fewer than 2**-60 allows: fewer small ops, which dominate a chain of a few thousand heads).
_GROUP_TINY32 = 2.0**-100

# Largest [R, L, L] weight tensor ``chained_reverse_scan`` builds to solve short rows in one product: about the cost of
# one more level of groups.
_DENSE_MAX = 2**14

# Steps per group of ``chained_reverse_scan``, widest first: a wider group means fewer levels, as long as the running
# product stays above the dtype's bound.
_GROUPS = (64, 32, 16, 8, 4)

_LOWER: dict[tuple[int, torch.dtype, torch.device, bool], torch.Tensor] = {}


def lower_ones(size: int, dtype: torch.dtype, device: torch.device, negate: bool = False) -> torch.Tensor:
    """The ``size x size`` matrix ``M[j, k] = 1`` for ``j >= k`` (``-1`` with ``negate``), cached per dtype and device.

    ``x @ M`` sums each row of ``x`` from column ``k`` to the end: the reverse cumulative sum, as one matrix product.
    """
    key = (size, dtype, device, negate)
    if key not in _LOWER:
        ones = torch.ones(size, size, dtype=dtype, device=device).tril_()
        _LOWER[key] = ones.neg_() if negate else ones
    return _LOWER[key]


def suffix_sums(x: torch.Tensor, out: torch.Tensor, negate: bool = False) -> torch.Tensor:
    """``out[:, k] = sum_{j >= k} x[:, j]`` (``-sum`` with ``negate``) along each row of a ``[N, C]`` block of chunks.

    One product with ``lower_ones``, the fastest form on 2 CPU cores; where TF32 or bfloat16 could round a float32
    product (``float32_matmul_is_exact``), a cumulative sum instead, ``sum_{j >= k} = total - sum_{j < k}``, at float32
    precision and about 1.5 times the product's time (a float64 product takes 7 times).

    Args:
        x: ``[N, C]``, float32 or float64.
        out: ``[N, C]`` destination of ``x``'s dtype, not overlapping ``x``.
        negate: return the negated sums (saves a pass when the caller has ``-x``).

    Returns:
        ``out``.

    Example:
        >>> suffix_sums(torch.tensor([[1.0, 2.0, 3.0]]), torch.empty(1, 3))
        tensor([[6., 5., 3.]])
    """
    if x.dtype != torch.float32 or float32_matmul_is_exact(x.device):
        return torch.mm(x, lower_ones(x.shape[1], x.dtype, x.device, negate), out=out)
    torch.cumsum(x, 1, out=out)  # sum_{j <= k}
    total = out[:, -1:].clone()  # [N, 1]
    out.sub_(x).sub_(total)  # sum_{j < k} - total = -sum_{j >= k}
    return out if negate else out.neg_()


_DENSE_MASKS: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}


def _dense_masks(length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 ``[L, L]`` masks of ``_chain_dense``, cached: 1 where ``i < n`` (else 0), and 1 where ``i >= n``."""
    key = (length, device)
    if key not in _DENSE_MASKS:
        on_and_above = torch.ones(length, length, dtype=torch.float64, device=device).triu_()
        _DENSE_MASKS[key] = (1.0 - on_and_above, on_and_above)
    return _DENSE_MASKS[key]


def _chain_dense(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``chained_reverse_scan`` of a short row as one matrix, in float64: ``y = x + C x_next`` with
    ``C[n, i] = d[n] ... d[i]`` for ``i >= n`` and 0 below the diagonal, ``x_next[i] = x[i+1]`` (0 past the end)."""
    x, d = x.to(torch.float64), d.to(torch.float64)
    below, on_and_above = _dense_masks(x.shape[1], x.device)
    # factors[:, n, i] = d[i] for i >= n and 1 below: their running product along i is C on and above the diagonal.
    products = torch.addcmul(below, d[:, None, :], on_and_above).cumprod_(-1).mul_(on_and_above)  # [R, L, L]
    following = torch.nn.functional.pad(x[:, 1:], (0, 1))  # [R, L], x[i+1]
    return torch.baddbmm(x[:, :, None], products, following[:, :, None])[:, :, 0]


def _chain_doubling(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``chained_reverse_scan`` by recursive doubling: ``log2 L`` steps, products only (any decays, even 0)."""
    y, reach = x.to(torch.float64, copy=True), d.to(torch.float64, copy=True)
    length, step = x.shape[1], 1
    while step < length:
        y[:, : length - step] += reach[:, : length - step] * y[:, step:]
        reach[:, : length - step] = reach[:, : length - step] * reach[:, step:]
        step *= 2
    return y


def _chain_group(lo: float, single: bool) -> tuple[int, torch.dtype] | None:
    """The widest group of ``_GROUPS`` whose running product of decays (at least ``lo**group``) stays above float32's
    bound (when ``single``) or float64's, with its dtype; None when even 4 steps fall below float64's."""
    for dtype, tiny in ((torch.float32, _GROUP_TINY32), (torch.float64, _TINY64)):
        if dtype == torch.float32 and not single:
            continue
        for group in _GROUPS:
            if lo**group >= tiny:
                return group, dtype
    return None


def chained_reverse_scan(x: torch.Tensor, d: torch.Tensor, lo: float) -> torch.Tensor:
    """Solve ``y[:, n] = x[:, n] + d[:, n] * y[:, n+1]`` backward along the last axis, with ``y[:, L] = 0``.

    Groups of ``G`` steps are solved at once by rescaling with the running product ``P`` of the decays
    (``y[k] = sum_{j >= k} P[j] x[j] / P[k]``, ``P[k] = d[0] ... d[k-1]`` within the group, one ``[N, G] @ [G, G]``
    product); the group heads are linked by the same scan, recursively, and a short row is solved with one small
    triangular matrix. ``G`` is the widest of 64, 32, 16, 8, 4 that keeps ``P`` (at least ``lo**G``) above ``2**-100``
    in float32 or ``2**-600`` in float64; below that, recursive doubling. It links chunk heads (a few thousand per
    row), where the fixed cost of each op dominates: it makes few of them.

    Args:
        x: ``[R, L]`` floating tensor (any strides).
        d: ``[R, L]`` decays, every one in ``[lo, 1]`` (any strides: a column of a chunk buffer is read once).
        lo: a lower bound of the decays (it sets the group sizes that keep the rescaling exact).

    Returns:
        ``[R, L]``, float64, except after a long first level of float32 input (more than 256 steps) while float32
        products are exact (``float32_matmul_is_exact``): float32 then.

    Example:
        >>> chained_reverse_scan(torch.tensor([[1.0, 1.0, 1.0]]), torch.tensor([[0.5, 0.25, 1.0]]), 0.25)
        tensor([[1.6250, 1.2500, 1.0000]], dtype=torch.float64)
    """
    rows, length = x.shape
    if length <= 16 or rows * length * length <= _DENSE_MAX:
        return _chain_dense(x, d)
    single = x.dtype == torch.float32 and d.dtype == torch.float32 and length > 256
    choice = _chain_group(lo, single and float32_matmul_is_exact(x.device))
    if choice is None:
        return _chain_doubling(x, d)
    group, dtype = choice
    n_groups = -(-length // group)
    pad = n_groups * group - length
    if x.dtype != dtype or d.dtype != dtype:
        x, d = x.to(dtype), d.to(dtype)
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
        d = torch.nn.functional.pad(d, (0, pad), value=1.0)
    prods = torch.cumprod(d.reshape(rows, n_groups, group), -1)  # [R, n, G], d[0] * ... * d[k] within the group
    before = torch.nn.functional.pad(prods[:, :, :-1], (1, 0), value=1.0)  # [R, n, G], d[0] * ... * d[k-1]
    sums = torch.empty_like(before)  # [R, n, G]
    suffix_sums((x.reshape(rows, n_groups, group) * before).view(-1, group), out=sums.view(-1, group))
    through = prods[:, :, -1]  # [R, n], the decay across a whole group
    heads = chained_reverse_scan(sums[:, :, 0], through, lo**group)  # [R, n], y at each group's first step
    carry = torch.mul(through[:, :-1], heads[:, 1:], out=through[:, :-1])  # [R, n-1], each group's incoming carry
    sums[:, :-1] += carry[:, :, None]  # the next group's head, carried into every step of this one
    return sums.div_(before).view(rows, n_groups * group)[:, :length]


class PolicyLayout:
    """Where each row's policy tokens are, so they can be gathered to the left and scattered back.

    Row ``b``'s ``k``-th policy token (in order) lands in column ``k`` of the packed ``[B, L]`` block, ``L`` the
    largest policy count of the batch (rounded up so the scan's chunks need no extra copy). Columns past a row's
    count hold 0, which every recursion in this package reads as "the episode is over" (value 0, reward 0).

    Args:
        mask: ``[B, T]`` policy mask, bool or numeric (nonzero means a policy token).

    Attributes:
        mask: ``[B, T]`` bool.
        counts: ``[B]`` int64, policy tokens per row.
        length: ``L``, the packed width holding every row's policy tokens.
        slot: ``[B, T]`` int64, the packed column of each policy token; ``length`` (a scratch column) elsewhere.

    Example:
        >>> layout = PolicyLayout(torch.tensor([[1, 0, 0, 1, 1]]))
        >>> layout.pack(torch.tensor([[1.0, 9.0, 9.0, 2.0, 3.0]]))[:, :3]
        tensor([[1., 2., 3.]])
        >>> layout.unpack(torch.tensor([[10.0, 20.0, 30.0]]))
        tensor([[10.,  0.,  0., 20., 30.]])
    """

    def __init__(self, mask: torch.Tensor) -> None:
        if mask.dim() != 2:
            raise ValueError(f"the mask must be [B, T], got shape {tuple(mask.shape)}")
        self.mask = mask if mask.dtype == torch.bool else mask != 0  # [B, T]
        # Through a uint8 view: torch's cumsum of a bool tensor takes a slow conversion path on CPU.
        seen = self.mask.view(torch.uint8).cumsum(1, dtype=torch.int64)  # [B, T], policy tokens up to and including t
        self.counts = seen[:, -1].clone() if seen.shape[1] else seen.new_zeros(seen.shape[0])  # [B]
        most = int(self.counts.max()) if self.counts.numel() else 0
        self.length = most
        seen -= 1
        self.slot = seen.masked_fill_(~self.mask, most)  # [B, T]
        # One scratch column for the non-policy positions, rounded up to a multiple of the scan's chunk.
        self._width = -(-(most + 1) // _CHUNK) * _CHUNK

    def pack(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Gather the policy tokens of ``x`` (``[B, T]``) to the left: ``[B, W]``, zeros past each row's count.

        ``W >= L + 1`` (the scan's chunk multiple); column ``L`` and beyond are 0. Values of ``x`` at non-policy
        positions land only in column ``L``, which is zeroed before anything reads it, so garbage there (NaN and inf
        included) never reaches a recursion or a chunk's matrix product.
        """
        dtype = x.dtype if dtype is None else dtype
        packed = x.new_zeros((x.shape[0], self._width), dtype=dtype)  # [B, W]
        packed.scatter_(1, self.slot, x.to(dtype))
        packed[:, self.length] = 0  # the scratch column received every non-policy value
        return packed

    def unpack(self, packed: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Scatter a packed ``[B, W]`` block back to ``[B, T]``: token ``k`` of a row returns to its position.

        Non-policy positions get 0: they all read column ``L``, which is set to 0 in place first (packed blocks
        are this package's temporaries).
        """
        if packed.shape[1] <= self.length:
            packed = torch.nn.functional.pad(packed, (0, self.length + 1 - packed.shape[1]))  # [B, L+1]
        packed[:, self.length] = 0
        out = torch.gather(packed, 1, self.slot)  # [B, T]
        return out if dtype is None else out.to(dtype)

    def next_in_row(self, packed: torch.Tensor, steps: int = 1) -> torch.Tensor:
        """``packed`` shifted left by ``steps`` columns, zeros entering on the right: the value ``steps`` policy
        tokens later in the same row, 0 once the row's episode is over. ``[B, W]`` -> ``[B, W]``."""
        out = torch.zeros_like(packed)  # [B, W]
        if steps < packed.shape[1]:
            out[:, : packed.shape[1] - steps] = packed[:, steps:]
        return out
