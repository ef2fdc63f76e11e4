"""Workload registry: name -> Workload class.

The built-ins are listed here; workloads of other installed packages come from the entry-point
group ``dpsuite.workloads``, and a one-off from its import path (``mypkg.models:MyWorkload``):
see ``workloads.plugins``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads import plugins
from workloads.base import Data, Workload, WorkloadConfig
from workloads.cifar_resnet import CIFARResNet
from workloads.gpt2 import GPT2Workload
from workloads.mnist_1d import MNIST1DCNN, MNIST1DMLP
from workloads.plugins import PluginError
from workloads.tiny_gpt import TinyGPTWorkload
from workloads.vision import TorchvisionWorkload

REGISTRY: dict[str, type[Workload]] = {
    w.name: w
    for w in (
        MNIST1DMLP,
        MNIST1DCNN,
        CIFARResNet,
        TinyGPTWorkload,
        GPT2Workload,
        TorchvisionWorkload,
    )
}


def available() -> dict[str, type[Workload]]:
    """The built-ins and every installed plugin that loads (a built-in name is never shadowed)."""
    found = {n: p.workload for n, p in plugins.discovered().items() if p.workload is not None}
    return {**found, **REGISTRY}


def broken() -> dict[str, str]:
    """Installed plugins that cannot be used, with the one-line reason."""
    out = {}
    for name, plugin in plugins.discovered().items():
        if name in REGISTRY:
            out[name] = f"workload plugin '{name}' ({plugin.target}): shadows the built-in"
        elif plugin.error is not None:
            out[name] = f"workload plugin '{name}' ({plugin.target}): {plugin.error}"
    return out


def names() -> list[str]:
    return sorted(available())


def lookup(name: str) -> type[Workload]:
    """The workload class for a name or an import path; KeyError for an unknown name,
    PluginError for a plugin that cannot be used."""
    if name in REGISTRY:
        return REGISTRY[name]
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
    "Data",
    "Workload",
    "WorkloadConfig",
    "REGISTRY",
    "PluginError",
    "available",
    "broken",
    "get_workload",
    "lookup",
    "names",
]
