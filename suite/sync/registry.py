"""The strategies by name, and the one a run's training loop calls."""

from __future__ import annotations

import torch

from dpsuite.sync.allreduce import AllReduce
from dpsuite.sync.base import SyncStrategy
from dpsuite.sync.compressed import BF16Compression, FP16Compression
from dpsuite.sync.config import SyncConfig
from dpsuite.sync.local_sgd import LocalSGD
from dpsuite.sync.param_server import ParameterServer
from dpsuite.sync.powersgd import PowerSGD

STRATEGIES: dict[str, type[SyncStrategy]] = {
    s.name: s
    for s in (AllReduce, ParameterServer, LocalSGD, FP16Compression, BF16Compression, PowerSGD)
}


def build(config: SyncConfig, device: torch.device, world_size: int) -> SyncStrategy:
    """The strategy for ``config``; with one process there is nothing to synchronize."""
    if world_size <= 1:
        return SyncStrategy(config, device)
    return STRATEGIES[config.name](config, device, world_size)


def traits(name: str) -> dict[str, int]:
    """The strategy's traits as ``run.json`` records them: its place in the reports."""
    return {"sync_order": list(STRATEGIES).index(name)}
