"""The estimators do not depend on the device: NaN and inf at non-policy positions never reach an output, and the
float32 scans keep float32's precision whatever the global matmul setting (TF32 on CUDA, bfloat16 on oneDNN).

Both GAE paths are checked: the numba loop (the CPU default) and the torch scan (the only one on CUDA, taken here
with ``WHILEAI_NO_NATIVE=1``, and the one inputs needing a gradient take). Whether a CPU honours the
float32 matmul setting depends on its units (this project's 2-core machines have no bfloat16 or TF32 ones), so the
precision tests emulate what cuBLAS does with TF32 allowed: while the setting allows it, every float32 operand of a
matrix product is rounded to TF32's 10-bit mantissa (bfloat16's 7 bits) before the product. A ``gpu`` test checks the
real thing on CUDA.
"""

from __future__ import annotations

import contextlib
import math
from typing import ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from whileai.advantages import (
    gae_advantages,
    nstep_returns,
    outcome_rewards,
    returns_to_go,
    td_errors,
    turn_advantages,
    whiten,
)
from whileai.advantages.native import native_available

GARBAGE = (math.nan, math.inf, -math.inf)
aten = torch.ops.aten
PATHS = ["torch", pytest.param("native", marks=pytest.mark.skipif(not native_available(), reason="numba missing"))]


@contextlib.contextmanager
def gae_path(path: str):
    """Route ``gae_advantages`` through the numba loop or the torch scan (the CUDA path) while the block runs."""
    with pytest.MonkeyPatch.context() as patch:
        if path == "torch":
            patch.setenv("WHILEAI_NO_NATIVE", "1")
        else:
            patch.delenv("WHILEAI_NO_NATIVE", raising=False)
        yield


def with_garbage(x: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """``x`` with NaN, +inf or -inf (drawn per position) wherever the mask is 0."""
    pick = torch.randint(0, len(GARBAGE), x.shape, generator=torch.Generator().manual_seed(seed))
    garbage = torch.tensor(GARBAGE, dtype=x.dtype)[pick]
    return torch.where(mask, x, garbage)


def token_outputs(r, v, m, gamma, lam):
    """Every token-level estimator's outputs on one batch, by name."""
    advantages, targets = gae_advantages(r, v, m, gamma, lam)
    turn_adv, turn_tgt = turn_advantages(r, v, m, gamma, lam)
    return {
        "returns_to_go": returns_to_go(r, m, gamma),
        "td_errors": td_errors(r, v, m, gamma),
        "nstep_returns": nstep_returns(r, v, m, 3, gamma),
        "gae advantages": advantages,
        "gae targets": targets,
        "turn advantages": turn_adv,
        "turn targets": turn_tgt,
        "whiten": whiten(r, m),
    }


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 300),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**31 - 1),
)
def test_nan_and_inf_at_tool_positions_change_nothing(path, rows, length, density, gamma, lam, dtype, seed):
    """Garbage at mask-0 positions of rewards and values: every output equals the clean batch's, bit for bit, and is
    0 at those positions. Lengths cross the scan's chunks of 32."""
    gen = torch.Generator().manual_seed(seed)
    m = torch.rand(rows, length, generator=gen) < density
    r = torch.randn(rows, length, generator=gen, dtype=dtype).masked_fill(~m, 0.0)
    v = torch.randn(rows, length, generator=gen, dtype=dtype).masked_fill(~m, 0.0)
    dirty_r, dirty_v = with_garbage(r, m, seed), with_garbage(v, m, seed + 1)
    with gae_path(path):
        clean = token_outputs(r, v, m, gamma, lam)
        dirty = token_outputs(dirty_r, dirty_v, m, gamma, lam)
    for name, expected in clean.items():
        assert torch.isfinite(dirty[name]).all(), name
        assert torch.equal(dirty[name], expected), name
        assert not dirty[name][~m].any(), name


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("length", [100, 1000, 4099])
def test_nan_and_inf_on_long_rows_of_spans(path, length):
    """Long rows of calls and tool spans, at several discounts."""
    gen = torch.Generator().manual_seed(length)
    m = ((torch.arange(length) % 80) < 50).expand(8, length)
    r = torch.randn(8, length, generator=gen).masked_fill(~m, 0.0)
    v = torch.randn(8, length, generator=gen).masked_fill(~m, 0.0)
    dirty_r, dirty_v = with_garbage(r, m, 1), with_garbage(v, m, 2)
    with gae_path(path):
        for gamma, lam in [(0.99, 0.95), (1.0, 1.0), (0.5, 0.1)]:
            for clean, dirty in zip(
                gae_advantages(r, v, m, gamma, lam), gae_advantages(dirty_r, dirty_v, m, gamma, lam), strict=True
            ):
                assert torch.equal(clean, dirty)
                assert not dirty[~m].any()


def test_garbage_values_give_finite_gradients():
    """The differentiable (torch) path: a value at a tool position gets gradient 0, not NaN."""
    gen = torch.Generator().manual_seed(5)
    m = ((torch.arange(300) % 80) < 50).expand(3, 300)
    r = torch.randn(3, 300, generator=gen).masked_fill(~m, 0.0)
    v = torch.randn(3, 300, generator=gen).masked_fill(~m, 0.0)
    dirty = with_garbage(v, m, 3).requires_grad_()
    advantages, targets = gae_advantages(with_garbage(r, m, 4), dirty, m, 0.99, 0.95)
    (advantages.sum() + targets.square().sum()).backward()
    assert torch.isfinite(dirty.grad).all()
    assert not dirty.grad[~m].any()
    clean, _ = gae_advantages(r, v.clone().requires_grad_(), m, 0.99, 0.95)  # the same (torch) path, clean
    assert torch.equal(advantages.detach(), clean.detach())


def test_outcome_rewards_keep_zeros_off_the_calls_whatever_the_cost():
    """An inf call cost lands on the calls' last tokens only, and a row without a policy token stays all 0."""
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0]])
    out = outcome_rewards(torch.tensor([1.0, 1.0]), mask, call_costs=torch.tensor([math.inf, math.inf]))
    assert out[0].tolist() == [0, -math.inf, 0, 0, -math.inf]
    assert out[1].tolist() == [0, 0, 0, 0, 0]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.floats(0.05, 1.0), st.integers(0, 2**31 - 1))
def test_whiten_never_reads_unselected_entries(length, density, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(3, length, generator=gen) < density
    x = torch.randn(3, length, generator=gen).masked_fill(~mask, 0.0)
    out = whiten(with_garbage(x, mask, seed), mask)
    assert torch.equal(out, whiten(x, mask))
    assert not out[~mask].any()


# --- precision: the global float32 matmul setting changes no estimator ------------------------------------------


def rounded_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` rounded to ``bits`` bits of mantissa (to nearest), as tensor cores read a float32 operand."""
    if x.dtype != torch.float32:
        return x
    drop = 23 - bits
    as_int = x.contiguous().view(torch.int32)
    return ((as_int + (1 << (drop - 1))) & -(1 << drop)).view(torch.float32).view(x.shape)


def cpu_matmul_bits() -> int | None:
    """The mantissa bits torch lets oneDNN keep in a CPU float32 product under the current setting (None: all 23)."""
    precision = getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", None)
    if precision is None:  # torch < 2.9: one global setting
        precision = {"high": "tf32", "medium": "bf16"}.get(torch.get_float32_matmul_precision())
    return {"tf32": 10, "bf16": 7}.get(precision)


class ReducedPrecisionProducts(TorchDispatchMode):
    """Emulates a CPU whose oneDNN has TF32 and bfloat16 units: while torch's setting allows it, every float32 matrix
    product rounds its operands to 10 (TF32) or 7 (bfloat16) bits of mantissa and accumulates in float32, as cuBLAS
    does with TF32 allowed. Float64 products are left alone."""

    OPERANDS: ClassVar = {aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        operands = self.OPERANDS.get(func.overloadpacket, ())
        bits = cpu_matmul_bits() if operands else None
        if bits is not None:
            args = tuple(rounded_mantissa(a, bits) if i in operands else a for i, a in enumerate(args))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def matmul_precision(setting: str):
    """``torch.set_float32_matmul_precision(setting)`` for the block, the previous setting back afterwards."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(setting)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


@contextlib.contextmanager
def root_fp32_precision(setting: str):
    """``torch.backends.fp32_precision = setting`` for the block, with nothing set below it: what transformers' TF32
    switch (TRL's ``tf32: true``) does on torch >= 2.9, a state in which ``torch.get_float32_matmul_precision()``
    itself raises. Everything comes back afterwards."""
    if not hasattr(torch.backends, "fp32_precision"):
        pytest.skip("torch < 2.9 has no per-backend fp32_precision")
    below = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    previous = torch.backends.fp32_precision, [level.fp32_precision for level in below]
    for level in below:
        level.fp32_precision = "none"  # inherit from the root, as in a fresh process
    torch.backends.fp32_precision = setting
    try:
        yield
    finally:
        torch.backends.fp32_precision = previous[0]
        for level, value in zip(below, previous[1], strict=True):
            level.fp32_precision = value


@pytest.fixture(
    params=[lambda: matmul_precision("high"), lambda: matmul_precision("medium"), lambda: root_fp32_precision("tf32")],
    ids=["high", "medium", "fp32_precision-tf32"],
)
def reduced_matmul_precision(request):
    """The global float32 matmul setting switched down, with the hardware's rounding emulated; the previous setting
    comes back afterwards."""
    with request.param(), ReducedPrecisionProducts():
        yield


def test_the_emulation_rounds_float32_products(reduced_matmul_precision):
    """The emulation is not a no-op: a plain float32 product under it is off by 100x float32's rounding (and more)."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 32, generator=gen), torch.randn(32, 32, generator=gen)
    exact = a.double() @ b.double()
    assert ((a @ b).double() - exact).abs().max() > 1e-5 * exact.abs().max()


@pytest.mark.parametrize(
    "setting",
    [lambda: matmul_precision("high"), lambda: matmul_precision("medium"), lambda: root_fp32_precision("tf32")],
    ids=["high", "medium", "fp32_precision-tf32"],
)
def test_the_setting_is_read_on_both_backends(setting):
    from whileai.advantages.scan import float32_matmul_is_exact

    devices = [torch.device("cpu"), torch.device("cuda")]
    before = [float32_matmul_is_exact(device) for device in devices]
    with setting():
        assert not any(float32_matmul_is_exact(device) for device in devices)
    assert [float32_matmul_is_exact(device) for device in devices] == before


def long_row():
    """Two 30,000-token rows of 50-token calls and 30-token tool spans: small per-token costs, an outcome at the end,
    values of order 1, and NaN or inf at every tool position."""
    gen = torch.Generator().manual_seed(0)
    rows, length = 2, 30_000
    m = ((torch.arange(length) % 80) < 50).expand(rows, length)
    r = (torch.randn(rows, length, generator=gen, dtype=torch.float64) * 0.01).masked_fill(~m, 0.0)
    r[:, -1] += 1.0
    v = torch.randn(rows, length, generator=gen, dtype=torch.float64).masked_fill(~m, 0.0)
    return r, v, m


# float32 GAE at gamma = lambda = 1 over 30,000 tokens: measured within 1.5e-6 of max |A| (sums of 32 in float32),
# while TF32 operands put it 1.1e-2 off and bfloat16 ones more (about 1% of |A|). The bound sits 7x above the
# first and 1,000x below the second.
PRECISION = 1e-5


def close(x: torch.Tensor, reference: torch.Tensor) -> bool:
    return bool((x.double() - reference).abs().max() <= PRECISION * reference.abs().max())


@pytest.mark.parametrize("path", PATHS)
def test_float32_scans_keep_their_precision_under_reduced_matmul_precision(reduced_matmul_precision, path):
    r, v, m = long_row()
    references = {  # float64: never rounded by the setting (and the emulation leaves it alone too)
        "gae": gae_advantages(r, v, m, 1.0, 1.0)[0],
        "returns_to_go": returns_to_go(r, m, 1.0),
        "turns": turn_advantages(r, v, m, 1.0, 1.0)[0],
    }
    r32, v32 = with_garbage(r.float(), m, 1), with_garbage(v.float(), m, 2)
    with gae_path(path):
        results = {
            "gae": gae_advantages(r32, v32, m, 1.0, 1.0)[0],
            "returns_to_go": returns_to_go(r32, m, 1.0),
            "turns": turn_advantages(r32, v32, m, 1.0, 1.0)[0],
        }
    results["gae, packed"] = gae_advantages(r32, v32.clone().requires_grad_(), m, 1.0, 1.0)[0].detach()
    references["gae, packed"] = references["gae"]
    assert all(result.dtype == torch.float32 for result in results.values())
    assert [name for name, reference in references.items() if not close(results[name], reference)] == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("api", ["allow_tf32", "fp32_precision"])
def test_cuda_with_tf32_allowed_matches_float64(api):
    """The real thing: CUDA float32 with TF32 switched on the ways transformers does it for TRL's ``tf32: true`` (the
    legacy flag before torch 2.9, ``torch.backends.fp32_precision`` since), NaN and inf at tool positions, against
    the float64 reference on the CPU."""
    r, v, m = long_row()
    reference = gae_advantages(r, v, m, 1.0, 1.0)[0]
    reference_returns = returns_to_go(r, m, 1.0)
    r32 = with_garbage(r.float(), m, 1).cuda()
    v32 = with_garbage(v.float(), m, 2).cuda()
    if api == "allow_tf32":
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        setting = contextlib.ExitStack()
        setting.callback(setattr, torch.backends.cuda.matmul, "allow_tf32", previous)
    else:
        setting = root_fp32_precision("tf32")
    with setting:
        advantages, targets = gae_advantages(r32, v32, m.cuda(), 1.0, 1.0)
        returns = returns_to_go(r32, m.cuda(), 1.0)
    assert torch.isfinite(advantages).all() and torch.isfinite(targets).all()
    assert close(advantages.cpu(), reference)
    assert close(returns.cpu(), reference_returns)
