"""The unpacked GAE path of whileai.advantages.returns and the chained scan under it (whileai.advantages.scan):
against plain loops, against the packed path, across chunk, block and padding boundaries."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import whileai.advantages.returns as returns_module
from whileai.advantages import gae_advantages
from whileai.advantages.returns import _gae_unpacked, gae_packed
from whileai.advantages.scan import PolicyLayout, chained_reverse_scan


def loop_chain(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    y = torch.zeros_like(x, dtype=torch.float64)
    acc = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in reversed(range(x.shape[1])):
        acc = x[:, t].double() + d[:, t].double() * acc
        y[:, t] = acc
    return y


def packed_gae(r, v, m, gamma, lam):
    layout = PolicyLayout(m)
    adv, tgt = gae_packed(layout.pack(r), layout.pack(v), gamma, lam)
    return layout.unpack(adv), layout.unpack(tgt)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.sampled_from([1.0, 0.9, 0.3, 1e-3, 0.0]), st.integers(1, 3))
def test_chained_scan_matches_loop(length, lo, rows):
    gen = torch.Generator().manual_seed(length)
    x = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    d = lo + (1 - lo) * torch.rand(rows, length, dtype=torch.float64, generator=gen)
    y = chained_reverse_scan(x, d, lo)
    assert y.dtype == torch.float64
    assert torch.allclose(y, loop_chain(x, d), atol=1e-10, rtol=1e-10)


def test_chained_scan_float32_first_level():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 3000, generator=gen)
    d = 0.4 + 0.6 * torch.rand(3, 3000, generator=gen)
    assert torch.allclose(chained_reverse_scan(x, d, 0.4), loop_chain(x, d), atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 300),
    st.floats(0.3, 1.0),
    st.floats(0.3, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
)
def test_unpacked_equals_packed(rows, length, gamma, lam, density, seed):
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    v = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    m = torch.rand(rows, length, generator=gen) < density
    adv, tgt = _gae_unpacked(r, v, m, gamma, lam)
    ref_adv, ref_tgt = packed_gae(r, v, m, gamma, lam)
    assert torch.allclose(adv, ref_adv, atol=1e-10)
    assert torch.allclose(tgt, ref_tgt, atol=1e-10)


@pytest.mark.parametrize("length", [16, 1000, 4099])
def test_unpacked_row_blocks_and_padding(monkeypatch, length):
    """Rows processed in several blocks (a short last one), T a multiple of 16 or not, spans and random masks."""
    monkeypatch.setattr(returns_module, "_CPU_BLOCK", 3 * length)
    gen = torch.Generator().manual_seed(length)
    rows = 8
    r = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    v = torch.randn(rows, length, dtype=torch.float64, generator=gen)
    spans = ((torch.arange(length) % 80) < 50).expand(rows, length)
    for m in (spans, torch.rand(rows, length, generator=gen) < 0.6):
        for gamma, lam in [(0.99, 0.95), (1.0, 1.0), (0.5, 0.3)]:
            adv, tgt = gae_advantages(r, v, m, gamma, lam)
            ref_adv, ref_tgt = packed_gae(r, v, m, gamma, lam)
            assert torch.allclose(adv, ref_adv, atol=1e-10)
            assert torch.allclose(tgt, ref_tgt, atol=1e-10)


def test_small_discounts_and_gradients_take_the_packed_path():
    """gamma * lam below 0.074 (the rescaling bound) and inputs that require grad: same numbers, packed path."""
    gen = torch.Generator().manual_seed(3)
    r, v = (
        torch.randn(2, 50, generator=gen, dtype=torch.float64),
        torch.randn(2, 50, generator=gen, dtype=torch.float64),
    )
    m = torch.rand(2, 50, generator=gen) < 0.5
    for lam in (0.0, 0.05):
        adv, _ = gae_advantages(r, v, m, 0.9, lam)
        assert torch.allclose(adv, packed_gae(r, v, m, 0.9, lam)[0], atol=1e-12)
    v_grad = v.clone().requires_grad_()
    adv, _ = gae_advantages(r, v_grad, m, 0.99, 0.95)
    adv.sum().backward()
    assert v_grad.grad is not None
    assert torch.allclose(adv.detach(), gae_advantages(r, v, m, 0.99, 0.95)[0], atol=1e-12)


def test_unpacked_float32_long_spans_match_float64():
    gen = torch.Generator().manual_seed(4)
    r, v = torch.randn(4, 32768, generator=gen), torch.randn(4, 32768, generator=gen)
    m = ((torch.arange(32768) % 80) < 50).expand(4, 32768)
    adv32, tgt32 = gae_advantages(r, v, m, 0.99, 0.95)
    adv64, tgt64 = gae_advantages(r.double(), v.double(), m, 0.99, 0.95)
    assert adv32.dtype == torch.float32
    assert torch.allclose(adv32.double(), adv64, atol=1e-4)
    assert torch.allclose(tgt32.double(), tgt64, atol=1e-4)
