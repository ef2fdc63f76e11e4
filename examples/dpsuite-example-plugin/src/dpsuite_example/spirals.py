"""An MLP classifying points of interleaved spirals: a dpsuite workload from another package.

A workload is a config dataclass (its knobs, with defaults and bounds) and a class that builds
the model and the data; dpsuite does the rest (DDP, sharding, timing, results).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from dpsuite.workloads import Data, Workload, WorkloadConfig


@dataclass
class SpiralsConfig(WorkloadConfig):
    """An MLP on points of `arms` interleaved spirals."""

    name: str = "spirals_mlp"
    num_samples: int = field(default=4000, metadata={"ge": 10})
    """Generated points, 80 % train / 20 % eval."""
    arms: int = field(default=3, metadata={"ge": 2})
    """Spiral arms (= classes)."""
    hidden: int = field(default=64, metadata={"ge": 1})
    """Width of the two hidden layers."""
    base_lr: float = 0.05
    epochs: int = 20
    target_acc: float = 0.9


class SpiralsMLP(Workload):
    Config = SpiralsConfig
    config: SpiralsConfig

    @property
    def classes(self) -> int:  # type: ignore[override]
        return self.config.arms

    def num_train(self) -> int:
        return self.config.num_samples * 4 // 5

    def build_model(self) -> nn.Module:
        h = self.config.hidden
        return nn.Sequential(
            nn.Linear(2, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, self.config.arms)
        )

    def load_data(self) -> Data:
        n, arms = self.config.num_samples, self.config.arms
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, arms, (n,), generator=g)
        r = torch.rand(n, generator=g)
        angle = 3 * math.pi * r + 2 * math.pi * y / arms + 0.2 * torch.randn(n, generator=g)
        x = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
        cut = self.num_train()
        return Data(x[:cut], y[:cut], x[cut:], y[cut:])
