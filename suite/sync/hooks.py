"""DDP communication hooks as (state, function) pairs that wrappers can wrap before registration.

DDP takes one hook per model, so every strategy hands its hook to the training loop instead of
registering it: the loop may wrap it (`dpsuite.measure.comm_timer` times it) and registers the
result. Byte counting sits inside each strategy's hook, at the tensor actually communicated.
"""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration time.
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from dpsuite.sync.counter import CommCounter, ring_wire_bytes

Hook = Callable[[Any, dist.GradBucket], torch.futures.Future]


@dataclass(frozen=True)
class CommHook:
    """What ``DistributedDataParallel.register_comm_hook(state, hook)`` takes."""

    state: Any
    fn: Hook

    def register(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        ddp.register_comm_hook(self.state, self.fn)


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def counted_allreduce(counter: CommCounter, world_size: int) -> Hook:
    """PyTorch's ``allreduce_hook``, counting what each bucket's all-reduce sends.

    Inside a compression wrapper (``fp16_compress_wrapper``) the bucket it sees is already the
    compressed one, so the count is the compressed size.
    """

    def counted_allreduce_hook(
        process_group: Any, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        counter.add(ring_wire_bytes(tensor_bytes(bucket.buffer()), world_size))
        return default_hooks.allreduce_hook(process_group, bucket)

    return counted_allreduce_hook
