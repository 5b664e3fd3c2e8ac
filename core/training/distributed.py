"""What the processes of a multi-process run do together, on ``torch.distributed``.

- ``TorchGather``: the ``BatchGather`` of ``GroupwiseGrading.trl_reward``. TRL calls a reward function on each
  process with that process's slice of the generation batch, in rank order. A group of ``num_generations``
  completions straddles two processes unless ``per_device_train_batch_size * steps_per_generation`` is a multiple of
  it. ``TorchGather`` lets the reward function collect every slice, grade whole groups once on rank 0 and hand each
  process its slice back. It reads the process group when called, so it can be built before the trainer initializes
  distributed training; with one process it is a no-op.
- ``on_first_process``: work done once before training (the spread gate, a tiny model's warm start) on rank 0, its
  result handed to every process, with a wait sized to that work rather than to the process group's timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

__all__ = ["PREPARE_WAIT_S", "TorchGather", "on_first_process"]

T = TypeVar("T")

# How long the other processes wait for rank 0's work before training. The process group's own timeout
# (TrainingArguments.ddp_timeout, 30 minutes by default) bounds every collective of training; a judge gate over many
# rows or a warm start on a busy machine can take longer, so the wait has its own bound. Rank 0 failing ends the
# launch at once (the launcher stops the other processes), so this bound only ever ends a rank 0 that hangs.
PREPARE_WAIT_S = 24 * 3600.0


class TorchGather:
    """``all_gather`` and ``broadcast`` of Python objects over the default torch.distributed group."""

    @staticmethod
    def _dist() -> Any:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None

    @property
    def world_size(self) -> int:
        dist = self._dist()
        return dist.get_world_size() if dist is not None else 1

    @property
    def rank(self) -> int:
        dist = self._dist()
        return dist.get_rank() if dist is not None else 0

    def all_gather(self, value: Any) -> list[Any]:
        dist = self._dist()
        if dist is None:
            return [value]
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, value)
        return out

    def broadcast(self, value: Any) -> Any:
        dist = self._dist()
        if dist is None:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def on_first_process(work: Callable[[], T], processes: int, say: Callable[[str], None]) -> T:
    """``work()`` on the first process, its result on every process.

    With several processes the others wait on a gloo group of their own whose timeout is ``PREPARE_WAIT_S``, not the
    process group's: a spread gate that takes an hour does not end the launch. An exception on the first process is
    raised there and reported on the others as a ``RuntimeError`` naming it. With one process, ``work()``.
    """
    dist = TorchGather._dist()
    if dist is None or processes <= 1:
        return work()
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=PREPARE_WAIT_S))
    try:
        box: list[Any] = [None]
        error: BaseException | None = None
        if dist.get_rank() == 0:
            say(
                f"whileai: process 0 prepares the run (spread gate, model) while the other {processes - 1} wait for "
                f"it (at most {PREPARE_WAIT_S / 3600:g} h, not the process group's timeout)"
            )
            try:
                box[0] = ("done", work())
            except BaseException as exc:  # the others must hear of it, or they wait in vain
                error = exc
                box[0] = ("failed", f"{type(exc).__name__}: {exc}")
        dist.broadcast_object_list(box, src=0, group=group)
    finally:
        dist.destroy_process_group(group)
    if error is not None:
        raise error
    status, value = box[0]
    if status == "failed":
        raise RuntimeError(f"process 0 failed before training: {value}")
    return value
