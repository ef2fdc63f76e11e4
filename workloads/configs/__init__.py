"""The built-in workloads: the one list of them, by their configs (no torch).

Composing a config, `dpsuite run --help` and shell completion need only these. Each config
names the class that builds its workload (``class_path``, ``module:Class``), which loads torch
and is imported when a run needs it (``dpsuite.workloads.lookup``).
"""

from __future__ import annotations

from dpsuite.workloads.configs.base import RECIPE_FIELDS, WorkloadConfig
from dpsuite.workloads.configs.cifar_resnet import CIFARResNetConfig
from dpsuite.workloads.configs.gpt2 import GPT2Config
from dpsuite.workloads.configs.mnist_1d import MNIST1DCNNConfig, MNIST1DMLPConfig
from dpsuite.workloads.configs.tiny_gpt import TinyGPTConfig, TinyGPTLossConfig
from dpsuite.workloads.configs.vision import TorchvisionConfig

# name -> config, in the order the workloads are listed (a new workload: its line here)
CONFIGS: dict[str, type[WorkloadConfig]] = {
    c.name: c
    for c in (
        MNIST1DMLPConfig,
        MNIST1DCNNConfig,
        CIFARResNetConfig,
        TinyGPTConfig,
        TinyGPTLossConfig,
        GPT2Config,
        TorchvisionConfig,
    )
}

__all__ = ["CONFIGS", "RECIPE_FIELDS", "WorkloadConfig"]
