"""What the processes of a multi-process run do together before training, on ``torch.distributed``.

The reward function's gather across processes during training is ``whileai.grading.trl.TorchGather``.

- ``on_first_process``: work done once before training (the spread gate, a tiny model's warm start) on rank 0, its
  result handed to every process, with a wait sized to that work rather than to the process group's timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from whileai.grading.trl import TorchGather

__all__ = ["PREPARE_WAIT_S", "on_first_process"]

T = TypeVar("T")

# How long the other processes wait for rank 0's work before training. The process group's own timeout
# (TrainingArguments.ddp_timeout, 30 minutes by default) bounds every collective of training; a judge gate over many
# rows or a warm start on a busy machine can take longer, so the wait has its own bound. Rank 0 failing ends the
# launch at once (the launcher stops the other processes), so this bound only ever ends a rank 0 that hangs.
PREPARE_WAIT_S = 24 * 3600.0


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
