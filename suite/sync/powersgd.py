"""PowerSGD low-rank gradient compression (Vogels et al. 2019), PyTorch's ``powerSGD_hook``."""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration time.
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

from dpsuite.sync.base import SyncStrategy, ddp_wrap
from dpsuite.sync.config import PowerSGDConfig
from dpsuite.sync.counter import CommCounter, ring_wire_bytes
from dpsuite.sync.hooks import CommHook, Hook

# powerSGD_hook's collectives per bucket once compression has started: the uncompressed
# tensors (issued even when empty), then the Ps, then the Qs.
COMPRESSED_COLLECTIVES = 3


class PowerSGD(SyncStrategy):
    """DDP with ``powerSGD_hook``: rank-r factors for weight matrices, plain all-reduce first."""

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    Config = PowerSGDConfig
    averages_gradients: ClassVar[bool] = False  # the low-rank gradient is not the average

    def comm_hook(self) -> CommHook:
        s = self.config
        state = psgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=s.rank,
            start_powerSGD_iter=s.start_iter,
            min_compression_rate=s.min_compression_rate,
            use_error_feedback=s.error_feedback,
            warm_start=s.warm_start,
            random_seed=0,  # the same random projections on every rank, as the hook requires
        )
        return CommHook(state, counted_powersgd(self.counter, self.world_size))


def counted_powersgd(counter: CommCounter, world_size: int) -> Hook:
    """``powerSGD_hook``, counting the bytes it hands to its all-reduces for each bucket.

    Before ``start_powerSGD_iter`` the hook all-reduces the bucket as it is. After, it sends
    the uncompressed tensors, the Ps and the Qs; the hook's own running tally of elements after
    compression (``total_numel_after_compression``) grows by exactly their total size, which is
    checked against the P and Q buffers the hook allocated.
    """

    def counted_powersgd_hook(
        state: psgd.PowerSGDState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        if state.iter < state.start_powerSGD_iter:
            counter.add(ring_wire_bytes(buffer.numel() * buffer.element_size(), world_size))
            return psgd.powerSGD_hook(state, bucket)
        before = state.total_numel_after_compression
        fut = psgd.powerSGD_hook(state, bucket)
        sent = state.total_numel_after_compression - before
        low_rank = _numel(state.p_memory_dict, bucket) + _numel(state.q_memory_dict, bucket)
        if not 0 <= sent - low_rank <= buffer.numel():
            raise RuntimeError(
                f"PowerSGD byte count is inconsistent: {sent} elements sent, P+Q hold {low_rank}"
            )
        counter.add(
            ring_wire_bytes(sent * buffer.element_size(), world_size), ops=COMPRESSED_COLLECTIVES
        )
        return fut

    return counted_powersgd_hook


def _numel(memory: dict[int, Any], bucket: dist.GradBucket) -> int:
    tensor = memory.get(bucket.index())
    return 0 if tensor is None else tensor.numel()
