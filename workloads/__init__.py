"""Workload registry: name -> Workload class. Adding a workload: its module (a config dataclass
and a Workload subclass) and one line here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads.base import Data, Workload, WorkloadConfig
from workloads.cifar_resnet import CIFARResNet
from workloads.mnist_1d import MNIST1DCNN, MNIST1DMLP
from workloads.tiny_gpt import TinyGPTWorkload

REGISTRY: dict[str, type[Workload]] = {
    w.name: w for w in (MNIST1DMLP, MNIST1DCNN, CIFARResNet, TinyGPTWorkload)
}


def names() -> list[str]:
    return sorted(REGISTRY)


def get_workload(name: str, cache_dir: str | Path | None = None, **params: Any) -> Workload:
    """A registered workload with its config's defaults, ``params`` overriding them.

    Unknown names raise KeyError listing the choices; bad values raise ValueError (or TypeError
    for an unknown parameter).
    """
    if name not in REGISTRY:
        raise KeyError(f"unknown workload '{name}' (choose from: {', '.join(names())})")
    cls = REGISTRY[name]
    return cls(cls.Config(**params), cache_dir=cache_dir)


__all__ = ["Data", "Workload", "WorkloadConfig", "REGISTRY", "get_workload", "names"]
