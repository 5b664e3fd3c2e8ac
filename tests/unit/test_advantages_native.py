"""The numba loops of whileai.advantages.native give the torch paths' numbers, and step aside where they must."""

from __future__ import annotations

import math
import os

import child_processes
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from whileai.advantages import gae_advantages  # noqa: E402
from whileai.advantages.native import gae_native, native_available  # noqa: E402

needs_native = pytest.mark.skipif(not native_available(), reason="numba is not installed (the fast extra)")


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 70),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.sampled_from([torch.float32, torch.float64]),
    st.integers(0, 2**31 - 1),
)
def test_native_equals_the_torch_scan(rows, length, gamma, lam, dtype, seed) -> None:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(rows, length, generator=generator) < 0.6
    rewards = torch.randn(rows, length, generator=generator, dtype=dtype) * mask
    values = torch.randn(rows, length, generator=generator, dtype=dtype) * 5  # garbage off the mask too
    fused = gae_native(rewards, values, mask, gamma, lam, dtype)
    assert fused is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WHILEAI_NO_NATIVE", "1")
        reference = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    tolerance = 1e-4 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(fused[0], reference[0], atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(fused[1], reference[1], atol=tolerance, rtol=tolerance)


def _recursion(r: list[float], v: list[float], m: list[bool], gamma: float, lam: float) -> list[float]:
    """Equation (7.1) one token at a time in Python floats, every IEEE special as it falls."""
    out, next_value, next_advantage = [0.0] * len(r), 0.0, 0.0
    for t in reversed(range(len(r))):
        if m[t]:
            out[t] = r[t] + gamma * next_value - v[t] + gamma * lam * next_advantage
            next_value, next_advantage = v[t], out[t]
    return out


@needs_native
@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 41),
    st.sampled_from([(0.99, 0.95), (1.0, 1.0), (0.9, 0.0), (0.0, 0.5)]),
    st.integers(0, 2**31 - 1),
)
def test_the_kernel_keeps_nan_and_inf_on_policy_tokens_where_the_recursion_puts_them(length, discounts, seed) -> None:
    """On policy tokens a NaN or an infinite reward or value lands where the token-by-token recursion puts NaN, +inf
    or -inf, and every finite advantage agrees to rounding, odd and even lengths alike."""
    gamma, lam = discounts
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(1, length, generator=generator) < 0.7
    rewards = torch.randn(1, length, generator=generator, dtype=torch.float64)
    values = torch.randn(1, length, generator=generator, dtype=torch.float64)
    specials = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64)
    for x in (rewards, values):
        where = torch.rand(1, length, generator=generator) < 0.1
        x[where] = specials[torch.randint(0, 3, (int(where.sum()),), generator=generator)]
    fused = gae_native(rewards, values, mask, gamma, lam, torch.float64)
    assert fused is not None
    expected = torch.tensor(
        _recursion(rewards[0].tolist(), values[0].tolist(), mask[0].tolist(), gamma, lam), dtype=torch.float64
    )
    got = fused[0][0]
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.isposinf(), expected.isposinf()) and torch.equal(got.isneginf(), expected.isneginf())
    finite = expected.isfinite()
    scale = torch.cat([expected[finite].abs(), torch.ones(1, dtype=torch.float64)]).max().item()
    # Every finite advantage (none at all, on a short row of special inputs) agrees to rounding.
    torch.testing.assert_close(got[finite], expected[finite], rtol=0.0, atol=1e-9 * scale)


@needs_native
def test_the_chapter_row_through_the_kernel() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0, -0.1, 0, 0, 0, 0, -0.1, 0, 0, 0.9]])
    values = torch.tensor([[0.5, 0.4, 9, 9, 9, 0.6, 0.7, 9, 9, 0.8]])
    advantages, _ = gae_native(rewards, values, mask, 1.0, 0.0, torch.float32)
    assert advantages[0, 1].item() == pytest.approx(0.1)  # bootstraps from V(c5) = 0.6, not the 9 at position 2
    assert advantages[0, 2:5].tolist() == [0.0, 0.0, 0.0]


def test_inputs_that_need_grad_take_the_differentiable_path() -> None:
    mask = torch.tensor([[1, 1, 0, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 0.2, 9.0, 0.3]], requires_grad=True)
    assert gae_native(rewards, values, mask, 1.0, 1.0, torch.float32) is None
    advantages, _ = gae_advantages(rewards, values, mask)
    advantages.sum().backward()
    assert values.grad is not None and values.grad[0, 2].item() == 0.0


def test_disabled_by_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("WHILEAI_NO_NATIVE", "1")
    assert not native_available()
    assert (
        gae_native(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), 1.0, 1.0, torch.float32)
        is None
    )


@needs_native
@pytest.mark.slow
def test_a_second_process_loads_the_loops_from_numbas_cache(tmp_path) -> None:
    """The loops are compiled once per machine, not once per process: a loop whose cache key changed from one process
    to the next would cost every run its compile time."""
    import sys

    probe = (
        "import torch\n"
        "from whileai.advantages import gae_advantages, group_advantages\n"
        "from whileai.advantages.native import _kernels\n"
        "group_advantages(torch.rand(8 * 3), 8)\n"
        "gae_advantages(torch.rand(2, 5), torch.rand(2, 5), torch.ones(2, 5, dtype=torch.bool))\n"
        "print(*(sum(kernel.stats.cache_hits.values()) for kernel in _kernels()))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [
        child_processes.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True) for _ in range(2)
    ]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert runs[0].stdout.split() == ["0", "0"]  # compiled, then written to the cache
    assert runs[1].stdout.split() == ["1", "1"]  # read back


@needs_native
def test_a_loop_that_cannot_compile_leaves_the_torch_path(monkeypatch) -> None:
    """A numba that cannot compile the loops on this platform costs speed, never a result."""
    from whileai.advantages import group_advantages, native

    def cannot_compile(*args) -> None:
        raise RuntimeError("no code generation for this platform")

    monkeypatch.setattr(native, "_KERNELS", (cannot_compile, cannot_compile))
    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0] * 3)
    assert native.centered_native(rewards, 8) is None
    assert not native.native_available()
    torch.testing.assert_close(group_advantages(rewards, 8)[:2], torch.tensor([2.4742, -0.3535]), atol=1e-4, rtol=0)
    monkeypatch.setattr(native, "_KERNELS", (cannot_compile, cannot_compile))
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0, -0.1, 0, 0, 0, 0, -0.1, 0, 0, 0.9]])
    values = torch.tensor([[0.5, 0.4, 9, 9, 9, 0.6, 0.7, 9, 9, 0.8]])
    assert native.gae_native(rewards, values, mask, 1.0, 0.0, torch.float32) is None
    assert gae_advantages(rewards, values, mask, 1.0, 0.0)[0][0, 1].item() == pytest.approx(0.1)
