"""All-reduce after every step: DistributedDataParallel, as in every data-parallel run."""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dpsuite.sync.base import SyncStrategy, ddp_wrap
from dpsuite.sync.config import AllReduceConfig
from dpsuite.sync.counter import ring_wire_bytes


class AllReduce(SyncStrategy):
    """DDP with its built-in all-reduce (C++: no Python runs per bucket)."""

    Config = AllReduceConfig
    files_traffic = False  # every bucket every step: `fixed_step_traffic`

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    def fixed_step_traffic(self, net: nn.Module) -> tuple[float, int]:
        """Every bucket is all-reduced every step: the bucket sizes DDP settled on."""
        if not isinstance(net, DDP):
            return 0.0, 0
        info = net._get_ddp_logging_data()
        sizes = str(info.get("rebuilt_bucket_sizes") or info.get("bucket_sizes") or "")
        buckets = [int(s) for s in sizes.replace(",", " ").split()]
        return sum(ring_wire_bytes(b, self.world_size) for b in buckets), len(buckets)
