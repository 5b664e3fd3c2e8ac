"""The ``BatchGather`` of ``GroupwiseGrading.trl_reward`` on ``torch.distributed``.

TRL calls a reward function on each process with that process's slice of the generation batch, in rank order. A
group of ``num_generations`` completions straddles two processes unless ``per_device_train_batch_size *
steps_per_generation`` is a multiple of it. ``TorchGather`` lets the reward function collect every slice, grade whole
groups once on rank 0 and hand each process its slice back. It reads the process group when called, so it can be
built before the trainer initializes distributed training; with one process it is a no-op.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TorchGather"]


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
