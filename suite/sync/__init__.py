"""Synchronization strategies: how data-parallel replicas agree (the `sync` config group).

``CONFIGS`` (``dpsuite.sync.config``) is the one list of strategies: name -> config, each
config naming its class (``class_path``), importing no torch. ``strategy`` imports one
strategy's class, ``STRATEGIES`` all of them (name -> class, in the list's order), and ``build``
returns the strategy the training loop calls (see `dpsuite.sync.base` for the calls). Those
import torch, so they load on first use: composing a config or printing help does not need them.
"""

from __future__ import annotations

from typing import Any

from dpsuite.sync.config import CONFIGS, SyncConfig

_LAZY = ("STRATEGIES", "SyncStrategy", "build", "strategy", "traits")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from dpsuite.sync import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'dpsuite.sync' has no attribute {name!r}")


__all__ = ["CONFIGS", "STRATEGIES", "SyncConfig", "SyncStrategy", "build", "strategy", "traits"]
