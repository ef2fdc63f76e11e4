"""The strategies' classes, each imported from its config's ``class_path`` when a run needs it,
and the one a run's training loop calls."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

import torch

from dpsuite.sync.base import SyncStrategy
from dpsuite.sync.config import CONFIGS, SyncConfig


@cache
def strategy(name: str) -> type[SyncStrategy]:
    """The class of strategy ``name``: its config's ``class_path`` (``module:Class``)."""
    module, _, attr = CONFIGS[name].class_path.partition(":")
    return getattr(importlib.import_module(module), attr)


def __getattr__(name: str) -> Any:
    if name == "STRATEGIES":  # every strategy's class, in the list's order (imports them all)
        return {n: strategy(n) for n in CONFIGS}
    raise AttributeError(f"module 'dpsuite.sync.registry' has no attribute {name!r}")


def build(
    config: SyncConfig, device: torch.device, world_size: int, precision: str = "fp32"
) -> SyncStrategy:
    """The strategy for ``config`` at the run's ``precision``; with one process there is
    nothing to synchronize."""
    if world_size <= 1:
        return SyncStrategy(config, device)
    built = strategy(config.name)(config, device, world_size)
    built.precision = precision
    return built


def traits(name: str) -> dict[str, int]:
    """The strategy's traits as ``run.json`` records them: its place in the reports."""
    return {"sync_order": list(CONFIGS).index(name)}
