"""Workload registry: name -> its config, and name -> its Workload class.

The built-ins are one list, ``dpsuite.workloads.configs.CONFIGS``: each config names its class
by import path (``class_path``); workloads of other installed packages come from the
entry-point group ``dpsuite.workloads``, and a one-off from its import path
(``mypkg.models:MyWorkload``): see ``dpsuite.workloads.plugins``.

The configs import no torch, so composing a config, printing help and completing a command line
stay quick. The classes (``REGISTRY``, ``available``, ``lookup``, ``get_workload``, ``Workload``,
``Data``, ``Datasets``) import torch on first use. ``lookup`` and ``chosen_configs`` import only
the chosen workload's module (a run of a built-in imports no plugin); listing (``configs``,
``available``, ``names``) imports every plugin, each contained, and warns once of each one it
leaves out.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsuite.workloads import plugins
from dpsuite.workloads.configs import CONFIGS, WorkloadConfig
from dpsuite.workloads.plugins import PluginError

if TYPE_CHECKING:
    from dpsuite.workloads.base import Data, Datasets, Workload

    REGISTRY: dict[str, type[Workload]]

_LAZY = {
    "Data": "dpsuite.workloads.base",
    "Datasets": "dpsuite.workloads.base",
    "Workload": "dpsuite.workloads.base",
}


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
    """Each workload's config by name, to list them: the built-ins' (no torch) and those of the
    installed plugins that load (each imported, contained)."""
    found = {n: p.workload.Config for n, p in _listed_plugins().items() if p.workload}
    return {**found, **CONFIGS}


def chosen_configs(chosen: Iterable[str]) -> dict[str, type[WorkloadConfig]]:
    """The built-ins' configs and those of the ``chosen`` plugins or import paths, no other
    plugin imported; PluginError for a chosen one that cannot be used. A name nobody offers is
    left out: composing says so, with a did-you-mean."""
    found = dict(CONFIGS)
    for name in chosen:
        if name in CONFIGS:
            _warn_once(plugins.offered().refused.get(name))  # a plugin of that name is ignored
        elif plugins.is_path(name) or name in plugins.offered().usable:
            found[name] = lookup(name).Config
    return found


def available() -> dict[str, type[Workload]]:
    """The built-ins and every installed plugin that loads (a built-in name is never shadowed)."""
    found = {n: p.workload for n, p in _listed_plugins().items() if p.workload is not None}
    return {**found, **{n: builtin(n) for n in CONFIGS}}


def broken() -> dict[str, str]:
    """Installed plugins that are not offered or cannot be used, each with its one line."""
    out = dict(plugins.offered().refused)
    for name, plugin in plugins.discovered().items():
        if plugin.error is not None:
            out[name] = f"workload plugin '{name}' ({plugin.target}): {plugin.error}"
    return out


def _listed_plugins() -> dict[str, plugins.Plugin]:
    """Every offered plugin, loaded; one warning for each that is left out of the list."""
    for line in broken().values():
        _warn_once(line)
    return plugins.discovered()


_warned: set[str] = set()


def _warn_once(line: str | None) -> None:
    """A plugin left out is one warning line per process, however often the list is read."""
    if line and line not in _warned:
        _warned.add(line)
        warnings.warn(line, UserWarning, stacklevel=3)


def names() -> list[str]:
    return sorted(configs())


def lookup(name: str) -> type[Workload]:
    """The workload class for a name or an import path, importing no other plugin; KeyError
    for an unknown name, PluginError for a plugin that cannot be used."""
    if name in CONFIGS:
        return builtin(name)
    if plugins.is_path(name):
        return plugins.load_path(name)
    if name in plugins.offered().usable:
        return plugins.load(name).load()
    if name in plugins.offered().refused:
        raise PluginError(plugins.offered().refused[name])
    raise KeyError(f"unknown workload '{name}' (choose from: {', '.join(names())})")


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
    "Datasets",
    "Workload",
    "WorkloadConfig",
    "REGISTRY",
    "PluginError",
    "available",
    "broken",
    "builtin",
    "chosen_configs",
    "configs",
    "get_workload",
    "lookup",
    "names",
]
