"""Synchronization strategies: how data-parallel replicas agree (the `sync` config group).

``CONFIGS`` holds each strategy's config (name -> dataclass) and imports no torch;
``STRATEGIES`` is the registry (name -> class; each class carries its ``Config``) and ``build``
returns the strategy the training loop calls (see `dpsuite.sync.base` for the calls). Those two
import torch, so they load on first use: composing a config or printing help does not need them.
"""

from __future__ import annotations

from typing import Any

from dpsuite.sync.config import CONFIGS, SyncConfig

_LAZY = ("STRATEGIES", "SyncStrategy", "build", "traits")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from dpsuite.sync import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'dpsuite.sync' has no attribute {name!r}")


__all__ = ["CONFIGS", "STRATEGIES", "SyncConfig", "SyncStrategy", "build", "traits"]
