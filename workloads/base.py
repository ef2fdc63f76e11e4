"""The workload interface: what a model family must supply to be benchmarked."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Reference:
    """Reference hyper-parameters: the small-batch recipe the LR rules scale from."""

    base_lr: float
    base_batch: int
    epochs: int
    target_acc: float
    weight_decay: float = 5e-4


@dataclass
class Data:
    """Train and eval splits as in-memory tensors (inputs, targets)."""

    train_x: Tensor
    train_y: Tensor
    eval_x: Tensor
    eval_y: Tensor

    @property
    def num_train(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def num_eval(self) -> int:
        return int(self.eval_x.shape[0])


class Workload(ABC):
    """A model, its data, its loss and metric, and a reference recipe.

    Workloads know nothing about distribution: the engine shards the data and wraps the model.
    """

    name: ClassVar[str]
    reference: ClassVar[Reference]

    def __init__(self, cache_dir: str | Path | None = None, **params: Any) -> None:
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.params = params

    @abstractmethod
    def build_model(self) -> nn.Module:
        """A freshly initialised model (the caller seeds torch first)."""

    @abstractmethod
    def load_data(self) -> Data:
        """Train and eval data; generated or read from a local copy, never downloaded."""

    def data_key(self) -> tuple:
        """What identifies this workload's data: equal keys mean equal ``load_data()`` results.

        The engine keeps datasets in memory by this key, so that the runs of a sweep in one
        process generate or read each dataset once.
        """
        params = tuple(sorted((k, repr(v)) for k, v in self.params.items()))
        return (self.name, params, str(self.cache_dir))

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Mean loss over the batch."""
        return nn.functional.cross_entropy(output, target)

    def correct(self, output: Tensor, target: Tensor) -> tuple[Tensor, int]:
        """Number of correct predictions and the number of predictions made."""
        return (output.argmax(dim=-1) == target).sum(), int(target.numel())

    def describe(self) -> dict[str, Any]:
        """Workload parameters to record with a run."""
        return {"name": self.name, **self.params}


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def to_tensor(x: Any, dtype: torch.dtype) -> Tensor:
    return torch.as_tensor(x).to(dtype)
