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

The matrix products run at the full precision of their dtype whatever the global float32 matmul setting
(``full_precision_matmul``): with TF32 allowed (``torch.backends.cuda.matmul.allow_tf32``, TRL's ``tf32: true``,
``torch.set_float32_matmul_precision("high")``) cuBLAS rounds float32 inputs to 10 bits of mantissa, and a float32
GAE over 30,000 tokens at ``gamma = lambda = 1`` would be off by about 1% of ``|A|``. Where that setting is on, the
float32 products run in float64 instead. Nothing global is switched (only read), so no other thread sees a change and
torch's check against mixing its legacy and per-backend precision switches never fires.

Garbage never meets a product: ``PolicyLayout.pack`` selects the policy tokens and zeroes every other column, so a
NaN or inf at a tool position never becomes ``NaN * 0`` (NaN) in a chunk's sum.

This module does not know about rewards, values or groups; ``returns``, ``turns`` and ``groups`` do.
"""

from __future__ import annotations

import torch

__all__ = [
    "PolicyLayout",
    "check_batch",
    "check_discount",
    "discounted_reverse_scan",
    "float32_matmul_is_exact",
    "full_precision_matmul",
    "result_dtype",
    "working_dtype",
]


def check_batch(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    """Raises ``ValueError`` unless ``x`` is ``[B, T]`` like ``mask``, naming ``x``."""
    if x.dim() != 2 or x.shape != mask.shape:
        raise ValueError(f"{name} must be [B, T] like the mask {tuple(mask.shape)}, got {tuple(x.shape)}")


def check_discount(name: str, value: float) -> float:
    """``value`` as a float in [0, 1] (a discount ``gamma`` or ``lam``); ``ValueError`` naming it otherwise."""
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value


def result_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype an estimator returns for input ``x``: its own float dtype, or torch's default for integers."""
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


# Tokens per chunk of the scan: 32 keeps the chunk product cheap (2 * 32 flops per element) and the recursion
# shallow (3 levels at 30,000 tokens); wider chunks measured slower on the CPU.
_CHUNK = 32


def working_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype the estimators compute in: float64 if any input is float64, float32 otherwise.

    float16 and bfloat16 are upcast because a 30,000-token sum in 8 bits of mantissa is noise.

    Example:
        >>> working_dtype(torch.zeros(2, dtype=torch.bfloat16))
        torch.float32
    """
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


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


class PolicyLayout:
    """Where each row's policy tokens are, so they can be gathered to the left and scattered back.

    Row ``b``'s ``k``-th policy token (in order) lands in column ``k`` of the packed ``[B, L + 1]`` block, ``L`` the
    largest policy count of the batch (the last column is scratch). Columns past a row's count hold 0, which every
    recursion in this package reads as "the episode is over" (value 0, reward 0).

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
        seen = self.mask.cumsum(1, dtype=torch.int64)  # [B, T], policy tokens up to and including t
        self.counts = seen[:, -1].clone() if seen.shape[1] else seen.new_zeros(seen.shape[0])  # [B]
        most = int(self.counts.max()) if self.counts.numel() else 0
        self.length = most
        seen -= 1
        self.slot = seen.masked_fill_(~self.mask, most)  # [B, T]
        self._width = most + 1  # one scratch column for the non-policy positions

    def pack(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Gather the policy tokens of ``x`` (``[B, T]``) to the left: ``[B, W]``, zeros past each row's count.

        ``W = L + 1``. Values of ``x`` at non-policy positions land only in column ``L``, which is zeroed before
        anything reads it, so garbage there (NaN and inf included) never reaches a recursion or a chunk's matrix
        product.
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
