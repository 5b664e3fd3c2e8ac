"""Reusable output memory (whileai.advantages.memory): reused once nothing holds it, never while anything does."""

from __future__ import annotations

import threading

import pytest
import torch

from whileai.advantages import memory
from whileai.advantages.memory import reusable_output

CPU = torch.device("cpu")


def test_reused_once_released():
    first = reusable_output((3, 5), torch.float32, CPU, "test released")
    address = first.data_ptr()
    del first
    second = reusable_output((3, 5), torch.float32, CPU, "test released")
    assert second.data_ptr() == address
    assert second.shape == (3, 5) and second.dtype == torch.float32 and second.is_contiguous()


@pytest.mark.parametrize(
    "holder",
    [
        lambda t: t,
        lambda t: t[1:2, :3],
        lambda t: t.view(-1),
        lambda t: t.detach(),
        lambda t: t.numpy(),
        lambda t: [t],
        lambda t: t.untyped_storage(),
    ],
    ids=["tensor", "slice", "view", "detach", "numpy", "list", "storage"],
)
def test_never_reused_while_held(holder):
    first = reusable_output((4, 4), torch.float64, CPU, "test held")
    first.fill_(7.0)
    held = holder(first)
    address = first.data_ptr()
    del first
    second = reusable_output((4, 4), torch.float64, CPU, "test held")
    second.fill_(-1.0)
    assert second.data_ptr() != address
    del held
    third = reusable_output((4, 4), torch.float64, CPU, "test held")
    assert third.data_ptr() == address


def test_a_saved_autograd_input_holds_its_memory():
    first = reusable_output((8,), torch.float32, CPU, "test autograd")
    first.fill_(2.0)
    weight = torch.ones(8, requires_grad=True)
    loss = (weight * first).sum()  # autograd saves `first` for the backward pass
    del first
    second = reusable_output((8,), torch.float32, CPU, "test autograd")
    second.fill_(0.0)
    loss.backward()
    assert torch.equal(weight.grad, torch.full((8,), 2.0))


def test_other_threads_sizes_and_large_outputs_get_fresh_memory(monkeypatch):
    first = reusable_output((16,), torch.float32, CPU, "test sizes")
    address = first.data_ptr()
    del first  # free for this thread, still this thread's
    seen = []
    thread = threading.Thread(target=lambda: seen.append(reusable_output((16,), torch.float32, CPU, "test sizes")))
    thread.start()
    thread.join()
    assert seen[0].data_ptr() != address  # each thread has its own
    wider = reusable_output((16,), torch.float64, CPU, "test sizes")  # 128 bytes, not 64: a new buffer
    assert wider.data_ptr() != address and wider.dtype == torch.float64
    monkeypatch.setattr(memory, "_MAX_BYTES", 32)
    assert reusable_output((16,), torch.float32, CPU, "test large").numel() == 16
    assert reusable_output((0, 3), torch.float32, CPU, "test empty").shape == (0, 3)
