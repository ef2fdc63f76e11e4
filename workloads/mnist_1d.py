"""MNIST-1D (Greydanus 2020): a 40-sample 1-D signal per example, 10 classes, generated offline."""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from workloads.base import Data, Reference, Workload

DEFAULT_CACHE = Path("~/.cache/dpsuite").expanduser()


def generation_args(num_samples: int, data_seed: int) -> dict[str, Any]:
    """The generator's arguments: the package defaults with our size and seed."""
    from mnist1d.data import get_dataset_args

    args = get_dataset_args(as_dict=True)
    args.update(num_samples=int(num_samples), seed=int(data_seed))
    args.pop("url", None)  # never used: we only generate
    return args


def cache_path(cache_dir: Path, args: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / "mnist1d" / f"mnist1d-{args['num_samples']}-{key}.npz"


def generate(args: dict[str, Any]) -> dict[str, np.ndarray]:
    """Run mnist1d's own generator without touching the caller's global RNG state.

    `make_dataset` reseeds Python's and NumPy's global generators; we save and restore both so
    that a run's own seeding is not silently replaced.
    """
    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        d = make_dataset(ObjectView(dict(args)))
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return {
        "x": d["x"].astype(np.float32),
        "y": d["y"].astype(np.int64),
        "x_test": d["x_test"].astype(np.float32),
        "y_test": d["y_test"].astype(np.int64),
    }


def load_or_generate(cache_dir: Path, num_samples: int, data_seed: int) -> dict[str, np.ndarray]:
    """Read the cached arrays, or generate and cache them (atomically: safe with many ranks)."""
    args = generation_args(num_samples, data_seed)
    path = cache_path(cache_dir, args)
    if path.exists():
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    arrays = generate(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return arrays


class MNIST1DWorkload(Workload):
    """Shared data handling for the MNIST-1D models."""

    def __init__(self, num_samples: int = 50_000, data_seed: int = 42, **kw: Any) -> None:
        super().__init__(num_samples=int(num_samples), data_seed=int(data_seed), **kw)
        if int(num_samples) < 100:
            raise ValueError(f"workload.num_samples must be at least 100, got {num_samples}")
        self.num_samples = int(num_samples)
        self.data_seed = int(data_seed)

    def data_key(self) -> tuple:
        # The MLP and the CNN train on the same generated data.
        return ("mnist1d", self.num_samples, self.data_seed)

    def load_data(self) -> Data:
        a = load_or_generate(self.cache_dir or DEFAULT_CACHE, self.num_samples, self.data_seed)
        return Data(
            train_x=torch.from_numpy(a["x"]),
            train_y=torch.from_numpy(a["y"]),
            eval_x=torch.from_numpy(a["x_test"]),
            eval_y=torch.from_numpy(a["y_test"]),
        )


class MNIST1DMLP(MNIST1DWorkload):
    """The MLP baseline of the MNIST-1D paper: 40-256-256-10."""

    name: ClassVar[str] = "mnist1d_mlp"
    reference: ClassVar[Reference] = Reference(
        base_lr=0.1, base_batch=32, epochs=10, target_acc=0.85
    )

    def build_model(self) -> nn.Module:
        return nn.Sequential(
            nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )


class _Conv1DNet(nn.Module):
    def __init__(self, channels: int = 25) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, 5, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(channels * 5, 10)  # 40 -> 19 -> 10 -> 5 positions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.unsqueeze(1)).flatten(1))


class MNIST1DCNN(MNIST1DWorkload):
    """The small 1-D convolutional net of the MNIST-1D paper (three conv layers, one linear)."""

    name: ClassVar[str] = "mnist1d_cnn"
    reference: ClassVar[Reference] = Reference(
        base_lr=0.05, base_batch=32, epochs=10, target_acc=0.90
    )

    def build_model(self) -> nn.Module:
        return _Conv1DNet()
