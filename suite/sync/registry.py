"""The strategies by name, and the one a run's training loop calls."""

from __future__ import annotations

import torch

from suite.sync.allreduce import AllReduce
from suite.sync.base import SyncStrategy
from suite.sync.compressed import BF16Compression, FP16Compression
from suite.sync.config import SyncConfig
from suite.sync.local_sgd import LocalSGD
from suite.sync.param_server import ParameterServer
from suite.sync.powersgd import PowerSGD

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
