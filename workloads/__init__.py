"""Workload registry: name -> Workload class."""

from __future__ import annotations

from typing import Any

from workloads.base import Data, Reference, Workload
from workloads.cifar_resnet import CIFARResNet
from workloads.mnist_1d import MNIST1DCNN, MNIST1DMLP
from workloads.tiny_gpt import TinyGPTWorkload

REGISTRY: dict[str, type[Workload]] = {
    w.name: w for w in (MNIST1DMLP, MNIST1DCNN, CIFARResNet, TinyGPTWorkload)
}


def names() -> list[str]:
    return sorted(REGISTRY)


def get_workload(name: str, **params: Any) -> Workload:
    """Instantiate a registered workload; unknown names raise KeyError listing the choices."""
    if name not in REGISTRY:
        raise KeyError(f"unknown workload '{name}' (choose from: {', '.join(names())})")
    return REGISTRY[name](**params)


__all__ = ["Data", "Reference", "Workload", "REGISTRY", "get_workload", "names"]
