"""The MNIST-1D workloads' configs (``dpsuite.workloads.mnist_1d`` builds their models and data)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dpsuite.workloads.configs.base import WorkloadConfig

# The generator's arguments as mnist1d's `get_dataset_args()` gives them (mnist1d 0.0.2), less
# the URL of its pickled copy (never used: we only generate). Written out rather than read at
# each run's start: importing mnist1d imports matplotlib.pyplot, about 0.9 s of every process
# that checks a config. tests/test_workloads.py keeps them equal to the installed package's.
GENERATOR_DEFAULTS: dict[str, Any] = {
    "num_samples": 5000,
    "train_split": 0.8,
    "template_len": 12,
    "padding": [36, 60],
    "scale_coeff": 0.4,
    "max_translation": 48,
    "corr_noise_scale": 0.25,
    "iid_noise_scale": 0.02,
    "shear_scale": 0.75,
    "shuffle_seq": False,
    "final_seq_length": 40,
    "seed": 42,
}


def generation_args(num_samples: int, data_seed: int) -> dict[str, Any]:
    """The generator's arguments: the package defaults with our size and seed."""
    args = copy.deepcopy(GENERATOR_DEFAULTS)
    args.update(num_samples=int(num_samples), seed=int(data_seed))
    return args


def split_sizes(args: dict[str, Any]) -> tuple[int, int]:
    """(train, test) samples the generator makes from these arguments."""
    n_train = int(args["num_samples"] * args["train_split"])
    return n_train, args["num_samples"] - n_train


@dataclass
class MNIST1DConfig(WorkloadConfig):
    """MNIST-1D, generated offline by the `mnist1d` package's own generator."""

    small: ClassVar[Mapping[str, Any]] = {"num_samples": 2000}

    num_samples: int = field(default=50_000, metadata={"ge": 100})
    """Samples generated: 80 % train (less `validation_samples`), 20 % test."""
    data_seed: int = field(default=42, metadata={"ge": 0})
    """Seed of the generator (the data, not the training)."""
    validation_samples: int = field(default=0, metadata={"ge": 0})
    """Training samples held out as a validation split (the last ones; 0: none). With it, the
    evaluations during training (and steps to target) are on validation, and the test split is
    evaluated once at the end (`final_test_acc`)."""

    def check(self) -> None:
        n_train = split_sizes(generation_args(self.num_samples, self.data_seed))[0]
        if self.validation_samples >= n_train:
            raise ValueError(
                f"workload.validation_samples={self.validation_samples} leaves no training "
                f"samples (the training split has {n_train})"
            )


@dataclass
class MNIST1DMLPConfig(MNIST1DConfig):
    class_path: ClassVar[str] = "dpsuite.workloads.mnist_1d:MNIST1DMLP"
    name: str = "mnist1d_mlp"
    base_lr: float = 0.1
    base_batch: int = 32
    epochs: int = 10
    target_acc: float = 0.85


@dataclass
class MNIST1DCNNConfig(MNIST1DConfig):
    class_path: ClassVar[str] = "dpsuite.workloads.mnist_1d:MNIST1DCNN"
    name: str = "mnist1d_cnn"
    base_lr: float = 0.05
    base_batch: int = 32
    epochs: int = 10
    target_acc: float = 0.90
