"""The workload interface: what a model family must supply to be benchmarked.

A workload is its config (a dataclass: the knobs of its data and model, and the small-batch
reference recipe the LR rules scale from, all with their defaults; see
``dpsuite.workloads.configs``,
which imports no torch) and a class that builds the model and the data from it. Workloads know
nothing about distribution: the engine shards the data and wraps the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset, IterableDataset

from dpsuite.workloads.configs.base import RECIPE_FIELDS, WorkloadConfig


@dataclass
class Data:
    """Train and eval splits as in-memory tensors (inputs, targets); with a validation split,
    eval is the validation split and test the held-out test split, evaluated once at the end."""

    train_x: Tensor
    train_y: Tensor
    eval_x: Tensor
    eval_y: Tensor
    test_x: Tensor | None = None
    test_y: Tensor | None = None

    @property
    def eval_split(self) -> str:
        """What the evaluations during training measure: `validation` or `test`."""
        return "test" if self.test_x is None else "validation"

    @property
    def num_train(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def num_eval(self) -> int:
        return int(self.eval_x.shape[0])

    def problem(self, classes: int | None) -> str | None:
        """What is wrong with these tensors (empty split, non-finite input, label out of
        range), or None when they are fit to train on. ``classes``: the targets are class
        labels in [0, classes); None: any targets (a regression), finite."""
        splits = [("train", self.train_x, self.train_y), ("eval", self.eval_x, self.eval_y)]
        if self.test_x is not None and self.test_y is not None:
            splits.append(("test", self.test_x, self.test_y))
        for split, x, y in splits:
            if x.shape[0] == 0 or x.shape[0] != y.shape[0]:
                return f"{split} split has {x.shape[0]} inputs and {y.shape[0]} targets"
            if x.is_floating_point() and not bool(torch.isfinite(x).all()):
                return f"{split} inputs hold NaN or infinite values"
            if classes is None:
                if y.is_floating_point() and not bool(torch.isfinite(y).all()):
                    return f"{split} targets hold NaN or infinite values"
            elif y.is_floating_point() or int(y.min()) < 0 or int(y.max()) >= classes:
                return f"{split} labels are not integers in [0, {classes})"
        return None


@dataclass
class Datasets:
    """Train and eval splits (and a held-out test split) as torch Datasets, map-style or
    iterable, read while training: the engine builds each rank's DataLoader (torch's
    DistributedSampler for map-style ones, the ``data.loader_*`` settings) and moves each batch
    to the device. A batch is whatever ``collate_fn`` (default: torch's) makes of the samples: a
    tensor, a tuple or a dict of them; ``Workload.batch_loss`` and ``batch_metrics`` read it."""

    train: Dataset
    eval: Dataset
    test: Dataset | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None

    @property
    def eval_split(self) -> str:
        return "test" if self.test is None else "validation"

    def splits(self) -> list[tuple[str, Dataset]]:
        named = [("train", self.train), ("eval", self.eval)]
        return named + ([("test", self.test)] if self.test is not None else [])

    def problem(self, classes: int | None) -> str | None:
        """What is wrong with these datasets before any sample is read (not a Dataset, an
        empty split), or None."""
        for split, ds in self.splits():
            if not isinstance(ds, (Dataset, IterableDataset)):
                return f"{split} split is a {type(ds).__name__}, not a torch Dataset"
            if sized(ds) == 0:
                return f"{split} split is empty"
        return None


def sized(ds: Dataset) -> int | None:
    """A dataset's length, or None for an iterable one that does not say."""
    try:
        return len(ds)  # type: ignore[arg-type]
    except TypeError:
        return None


class Workload(ABC):
    """A model, its data, its loss and metric, built from the workload's config."""

    name: ClassVar[str]  # its config's `name` (one spelling of it)
    Config: ClassVar[type[WorkloadConfig]]
    classes: ClassVar[int] = 10  # labels are integers in [0, classes)
    tokens_per_sample: ClassVar[int | None] = None  # token workloads: for tokens/s
    # Random inputs of a throughput benchmark: nothing to learn, so accuracy is not meaningful.
    synthetic_data: ClassVar[bool] = False
    eval_chunk: ClassVar[int] = 1024  # samples per forward pass in evaluation
    # Modules a rank imports when it builds the workload (those imported inside functions):
    # a launcher's forkserver imports them once, rather than every worker of every run.
    worker_imports: ClassVar[tuple[str, ...]] = ()
    # What steps-to-target counts: eval_acc (higher is better, target: config.target_acc) or
    # eval_loss (lower is better, target: config.target_loss, which the config must then have).
    target_metric: ClassVar[str] = "eval_acc"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "Config" in vars(cls):
            cls.name = cls.Config.name
        if cls.target_metric not in ("eval_acc", "eval_loss"):
            raise TypeError(f"{cls.__name__}.target_metric must be eval_acc or eval_loss")
        config = getattr(cls, "Config", None)
        wanted = "target_loss" if cls.target_metric == "eval_loss" else "target_acc"
        if config is not None and wanted not in {f.name for f in fields(config)}:
            raise TypeError(
                f"{cls.__name__}: target_metric {cls.target_metric} needs a config field {wanted}"
            )

    def __init__(self, config: WorkloadConfig, cache_dir: str | Path | None = None) -> None:
        config.check()
        self.config = config
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None

    def label(self) -> str:
        """The workload as results and reports name it: its name, and for a family of models
        the member (``torchvision-resnet50``, ``gpt2-124M``)."""
        return self.config.name

    @abstractmethod
    def build_model(self) -> nn.Module:
        """A freshly initialised model (the caller seeds torch first)."""

    def sample_shape(self) -> tuple[int, ...] | None:
        """The shape of one input sample (without the batch dimension), where the workload
        knows it without loading data: lets a run's memory be estimated before it starts."""
        return None

    @abstractmethod
    def load_data(self) -> Data | Datasets:
        """Train and eval data, generated or read from a local copy, never downloaded: in-memory
        tensors (``Data``) or Datasets read while training (``Datasets``)."""

    @abstractmethod
    def num_train(self) -> int:
        """Training samples ``load_data()`` will return, known without loading them."""

    def holds_data_in_memory(self) -> bool:
        """Whether each rank holds this workload's data in memory (what the memory estimate
        counts): True for in-memory tensors; a workload whose Datasets read their samples from
        files while training (memory-mapped, decoded per sample) returns False."""
        return True

    def data_key(self) -> tuple:
        """What identifies this workload's data: equal keys mean equal ``load_data()`` results.

        The engine keeps datasets in memory by this key, so that the runs of a sweep in one
        process generate or read each dataset once.
        """
        params = tuple(
            (f.name, repr(getattr(self.config, f.name)))
            for f in fields(self.config)
            if f.name not in RECIPE_FIELDS
        )
        return (params, str(self.cache_dir))

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        """Mean loss over the batch."""
        return nn.functional.cross_entropy(output, target)

    def correct(self, output: Tensor, target: Tensor) -> tuple[Tensor, int]:
        """Number of correct predictions and the number of predictions made."""
        return (output.argmax(dim=-1) == target).sum(), int(target.numel())

    def batch_loss(self, model: nn.Module, batch: Any) -> Tensor:
        """Mean training loss of one batch, as the data gives it (the default: an (inputs,
        labels) pair through ``loss``). Override for dict batches or a loss of your own."""
        inputs, target = batch
        return self.loss(model(inputs), target)

    def batch_metrics(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor | None, int]:
        """One evaluation batch: its mean loss, its correct predictions (None: this workload
        has no accuracy) and how many predictions they count (the weight of its loss)."""
        inputs, target = batch
        output = model(inputs)
        correct, count = self.correct(output, target)
        return self.loss(output, target), correct, count

    @property
    def higher_is_better(self) -> bool:
        """Whether the target metric improves upwards (accuracy) or downwards (a loss)."""
        return self.target_metric != "eval_loss"

    def target_value(self) -> float:
        """The value of the target metric counted as reaching the target."""
        name = "target_loss" if self.target_metric == "eval_loss" else "target_acc"
        return float(getattr(self.config, name))


def train_share(total: int) -> int:
    """Samples of ``total`` that go to training: 80 %, the rest is the eval split."""
    return total * 4 // 5


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
