"""Gradients compressed to 16-bit floats for the all-reduce (fp16 or bf16), restored after it."""

from __future__ import annotations

from typing import ClassVar

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from dpsuite.sync.base import SyncStrategy, ddp_wrap
from dpsuite.sync.config import BF16Config, FP16Config
from dpsuite.sync.hooks import CommHook, Hook, counted_allreduce


class HalfPrecisionCompression(SyncStrategy):
    """DDP whose buckets are all-reduced as 16-bit floats; PyTorch's wrapper casts the bucket,
    runs the inner hook on the cast bucket and casts back."""

    wrapper: ClassVar[Hook]

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    def comm_hook(self) -> CommHook:
        # The counting hook sits inside the cast, so it counts the 16-bit tensor it all-reduces.
        inner = counted_allreduce(self.counter, self.world_size)
        return CommHook(None, type(self).wrapper(inner))


class FP16Compression(HalfPrecisionCompression):
    """``sync=fp16``: PyTorch's fp16_compress_hook (half the bytes of fp32)."""

    Config = FP16Config
    wrapper = staticmethod(default_hooks.fp16_compress_wrapper)


class BF16Compression(HalfPrecisionCompression):
    """``sync=bf16``: PyTorch's bf16_compress_hook (fp32's exponent range, 8 mantissa bits)."""

    Config = BF16Config
    wrapper = staticmethod(default_hooks.bf16_compress_wrapper)
