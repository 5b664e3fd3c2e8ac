"""The fused CPU kernel for masked GAE gives the torch scan's numbers, and steps aside where it must."""

from __future__ import annotations

import math
import os

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
    """The kernel takes two positions a step (the earlier one from ``e + c * A_next``); on policy tokens a NaN or an
    infinite reward or value must still land where the token-by-token recursion puts NaN, +inf or -inf, and every
    finite advantage must agree to rounding, odd and even lengths alike."""
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
    scale = max(1.0, expected[finite].abs().max().item()) if finite.any() else 1.0
    assert (got[finite] - expected[finite]).abs().max().item() <= 1e-9 * scale if finite.any() else True


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
def test_a_second_process_loads_the_group_kernels_from_numbas_cache(tmp_path) -> None:
    """Each group kernel is compiled once per machine, not once per process: a kernel whose index key changed from
    one process to the next (a closure numba cannot hash the same way twice) would cost every run seconds."""
    import subprocess
    import sys

    probe = (
        "import torch\n"
        "from whileai.advantages import group_advantages\n"
        "from whileai.advantages.native import _group_kernel\n"
        "for size in (8, 5):\n"
        "    group_advantages(torch.rand(size * 3), size)\n"
        "    print(size, sum(_group_kernel(size).stats.cache_hits.values()))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True) for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert runs[0].stdout.split() == ["8", "0", "5", "0"]  # compiled, then written to the cache
    assert runs[1].stdout.split() == ["8", "1", "5", "1"]  # read back


@needs_native
def test_a_vector_kernel_that_cannot_be_built_leaves_the_torch_path(monkeypatch) -> None:
    """An llvmlite or numba without what the vector kernel needs costs speed, never a result."""
    from whileai.advantages import group_advantages, native

    def unavailable() -> None:
        raise ImportError("no numba.extending.intrinsic here")

    monkeypatch.setattr(native, "_GROUP_KERNELS", {})
    monkeypatch.setattr(native, "_BLOCK", None)
    monkeypatch.setattr(native, "_vector_block", unavailable)
    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0] * 3)
    assert native._group_kernel(8) is None
    assert native.centered_native(rewards, 8) is None
    torch.testing.assert_close(group_advantages(rewards, 8)[:2], torch.tensor([2.4742, -0.3535]), atol=1e-4, rtol=0)


@needs_native
def test_the_vector_kernels_run_unoptimized(tmp_path) -> None:
    """Built with ``NUMBA_OPT=0`` (numba's debugging setting), every form of the vector kernel (groups of 8 and 16,
    float32 and float64: transposed back, and broadcast from a stack buffer) gives the transposing loop's numbers. The
    buffer's vector stores once assumed a vector's alignment; the optimizer removed the buffer, an unoptimized build
    crashed on it. In a subprocess: a crash must fail the test, not end the run."""
    import subprocess
    import sys

    probe = (
        "import numba, numpy as np\n"
        "from whileai.advantages import native\n"
        "rng = np.random.default_rng(0)\n"
        "for size in (8, 16):\n"
        "    vector = numba.njit(error_model='numpy')(native._vector_rows(size))\n"
        "    loop = numba.njit(error_model='numpy')(native._group_rows(size))\n"
        "    for dtype in (np.float32, np.float64):\n"
        "        x = rng.normal(size=size * 8 * 3 + size * 3).astype(dtype)\n"
        "        for std in (True, False):\n"
        "            a, b = np.empty_like(x), np.empty_like(x)\n"
        "            vector(x, a, std, dtype(1.25), dtype(1e-4))\n"
        "            loop(x, b, std, dtype(1.25), dtype(1e-4))\n"
        "            print(size, dtype.__name__, std, bool(np.allclose(a, b, rtol=1e-5, atol=1e-5)))\n"
    )
    env = {**os.environ, "NUMBA_OPT": "0", "NUMBA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.split("\n")[:-1]
    assert len(lines) == 8 and all(line.endswith("True") for line in lines), run.stdout
