"""Gradients compressed to 16-bit floats for the all-reduce (fp16 or bf16), restored after it."""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from suite.sync.base import SyncStrategy, ddp_wrap
from suite.sync.hooks import CommHook, counted_allreduce

# PyTorch's wrappers cast the bucket, run the inner hook on the cast bucket and cast back;
# wrapper(allreduce_hook) is PyTorch's fp16_compress_hook / bf16_compress_hook.
WRAPPERS = {
    "fp16": default_hooks.fp16_compress_wrapper,
    "bf16": default_hooks.bf16_compress_wrapper,
}


class HalfPrecisionCompression(SyncStrategy):
    """DDP whose buckets are all-reduced as float16 or bfloat16 (``sync=fp16`` / ``bf16``)."""

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    def comm_hook(self) -> CommHook:
        # The counting hook sits inside the cast, so it counts the 16-bit tensor it all-reduces.
        return CommHook(None, WRAPPERS[self.spec.name](counted_allreduce(self.counter)))
