"""Workload registry: name -> its config, and name -> its Workload class.

The built-ins are one list, ``dpsuite.workloads.configs.CONFIGS``: each config names its class
by import path (``class_path``); workloads of other installed packages come from the
entry-point group ``dpsuite.workloads``, and a one-off from its import path
(``mypkg.models:MyWorkload``): see ``dpsuite.workloads.plugins``.

The configs import no torch, so composing a config, printing help and completing a command line
stay quick: ``configs()`` and ``names()`` read them. The classes (``REGISTRY``, ``available``,
``lookup``, ``get_workload``, ``Workload``, ``Data``) import torch on first use, and ``lookup``
imports only the chosen workload's module.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsuite.workloads import plugins
from dpsuite.workloads.configs import CONFIGS, WorkloadConfig
from dpsuite.workloads.plugins import PluginError

if TYPE_CHECKING:
    from dpsuite.workloads.base import Data, Workload

    REGISTRY: dict[str, type[Workload]]

_LAZY = {"Data": "dpsuite.workloads.base", "Workload": "dpsuite.workloads.base"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "REGISTRY":  # every built-in class, in the list's order (imports them all)
        return {n: builtin(n) for n in CONFIGS}
    raise AttributeError(f"module 'workloads' has no attribute {name!r}")


@cache
def builtin(name: str) -> type[Workload]:
    """The class of the built-in workload ``name``, imported from its config's ``class_path``."""
    cls = plugins.import_target(CONFIGS[name].class_path)
    assert isinstance(cls, type)
    return cls


def configs() -> dict[str, type[WorkloadConfig]]:
    """Each usable workload's config by name: the built-ins' (no torch) and those of the
    installed plugins that load (a built-in name is never shadowed)."""
    found = {n: p.workload.Config for n, p in plugins.discovered().items() if p.workload}
    return {**found, **CONFIGS}


def available() -> dict[str, type[Workload]]:
    """The built-ins and every installed plugin that loads (a built-in name is never shadowed)."""
    found = {n: p.workload for n, p in plugins.discovered().items() if p.workload is not None}
    return {**found, **{n: builtin(n) for n in CONFIGS}}


def broken() -> dict[str, str]:
    """Installed plugins that cannot be used, with the one-line reason."""
    out = {}
    for name, plugin in plugins.discovered().items():
        if name in CONFIGS:
            out[name] = f"workload plugin '{name}' ({plugin.target}): shadows the built-in"
        elif plugin.error is not None:
            out[name] = f"workload plugin '{name}' ({plugin.target}): {plugin.error}"
    return out


def names() -> list[str]:
    return sorted(configs())


def lookup(name: str) -> type[Workload]:
    """The workload class for a name or an import path; KeyError for an unknown name,
    PluginError for a plugin that cannot be used."""
    if name in CONFIGS:
        return builtin(name)
    if plugins.is_path(name):
        return plugins.load_path(name)
    if name in broken():
        raise PluginError(broken()[name])
    found = available()
    if name not in found:
        raise KeyError(f"unknown workload '{name}' (choose from: {', '.join(names())})")
    return found[name]


def get_workload(name: str, cache_dir: str | Path | None = None, **params: Any) -> Workload:
    """A workload with its config's defaults, ``params`` overriding them.

    Unknown names raise KeyError listing the choices; bad values raise ValueError (or TypeError
    for an unknown parameter).
    """
    cls = lookup(name)
    return cls(cls.Config(**{"name": name, **params}), cache_dir=cache_dir)


__all__ = [
    "CONFIGS",
    "Data",
    "Workload",
    "WorkloadConfig",
    "REGISTRY",
    "PluginError",
    "available",
    "broken",
    "builtin",
    "configs",
    "get_workload",
    "lookup",
    "names",
]
