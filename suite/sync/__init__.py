"""Synchronization strategies: how data-parallel replicas agree (the `sync` config group).

``build`` returns the strategy the training loop calls; see `suite.sync.base` for the calls.
"""

from __future__ import annotations

from suite.sync.spec import STRATEGIES, SyncSpec, parse

__all__ = ["STRATEGIES", "SyncSpec", "build", "parse"]


def build(spec: SyncSpec, device, distributed: bool):
    """The strategy for ``spec``; with one process there is nothing to synchronize."""
    from suite.sync.base import SyncStrategy

    if not distributed:
        return SyncStrategy(spec, device)
    if spec.name == "allreduce":
        from suite.sync.allreduce import AllReduce as cls
    elif spec.name == "param_server":
        from suite.sync.param_server import ParameterServer as cls
    elif spec.name == "local_sgd":
        from suite.sync.local_sgd import LocalSGD as cls
    elif spec.name in ("fp16", "bf16"):
        from suite.sync.compressed import HalfPrecisionCompression as cls
    elif spec.name == "powersgd":
        from suite.sync.powersgd import PowerSGD as cls
    else:
        raise ValueError(f"unknown sync strategy {spec.name!r}")
    return cls(spec, device)
