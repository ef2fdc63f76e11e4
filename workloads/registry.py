"""The built-in workloads by name: each class builds its model and data (torch) and carries
its ``Config`` (``dpsuite.workloads.configs``, whose ``CONFIGS`` lists the same names in this
order)."""

from __future__ import annotations

from dpsuite.workloads.base import Workload
from dpsuite.workloads.cifar_resnet import CIFARResNet
from dpsuite.workloads.gpt2 import GPT2Workload
from dpsuite.workloads.mnist_1d import MNIST1DCNN, MNIST1DMLP
from dpsuite.workloads.tiny_gpt import TinyGPTWorkload
from dpsuite.workloads.vision import TorchvisionWorkload

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
