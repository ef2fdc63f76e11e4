"""PowerSGD low-rank gradient compression (Vogels et al. 2019), PyTorch's ``powerSGD_hook``."""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration time.
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

from suite.sync.base import SyncConfig, SyncStrategy, ddp_wrap
from suite.sync.counter import CommCounter, ring_wire_bytes
from suite.sync.hooks import CommHook, Hook

# powerSGD_hook's collectives per bucket once compression has started: the uncompressed
# tensors (issued even when empty), then the Ps, then the Qs.
COMPRESSED_COLLECTIVES = 3


@dataclass
class PowerSGDConfig(SyncConfig):
    """PowerSGD (Vogels et al. 2019): weight matrices sent as rank-r factors P and Q."""

    name: str = "powersgd"
    rank: int = field(default=1, metadata={"ge": 1})
    """Matrix approximation rank r."""
    start_iter: int = field(default=10, metadata={"ge": 1})
    """Plain all-reduce for the first steps (>= 2 with error feedback or warm start: DDP
    rebuilds its buckets after the first step)."""
    min_compression_rate: float = field(default=2.0, metadata={"gt": 0})
    """Compress a matrix only if (n + m) x r x this < n x m."""
    error_feedback: bool = True
    """Carry each rank's compression error into its next gradient."""
    warm_start: bool = True
    """Reuse last step's P and Q as the starting point."""

    @property
    def label(self) -> str:
        extra = "" if self.error_feedback else ", no error feedback"
        return f"powersgd (rank {self.rank}, from step {self.start_iter}{extra})"

    def check(self, workers: int) -> None:
        # PyTorch's rule: with error feedback or warm start, the first two iterations must be
        # plain all-reduce, because DDP rebuilds its buckets after the first one.
        least = 2 if self.error_feedback or self.warm_start else 1
        if self.start_iter < least:
            raise ValueError(
                f"sync.start_iter must be an integer >= {least} with error feedback or warm "
                f"start, got {self.start_iter}"
            )


class PowerSGD(SyncStrategy):
    """DDP with ``powerSGD_hook``: rank-r factors for weight matrices, plain all-reduce first."""

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    name: ClassVar[str] = "powersgd"
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
