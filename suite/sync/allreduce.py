"""All-reduce after every step: DistributedDataParallel, as in every data-parallel run."""

from __future__ import annotations

from torch import nn

from suite.sync.base import SyncStrategy, ddp_wrap
from suite.sync.hooks import CommHook, counted_allreduce


class AllReduce(SyncStrategy):
    """DDP with PyTorch's ``allreduce_hook`` (what DDP does by default), counting bytes."""

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    def comm_hook(self) -> CommHook:
        return CommHook(None, counted_allreduce(self.counter))
