"""MNIST-1D (Greydanus 2020): a 40-sample 1-D signal per example, 10 classes, generated offline."""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dpsuite.workloads.base import Data, Workload
from dpsuite.workloads.configs.mnist_1d import (
    MNIST1DCNNConfig,
    MNIST1DConfig,
    MNIST1DMLPConfig,
    generation_args,
    split_sizes,
)

DEFAULT_CACHE = Path("~/.cache/dpsuite").expanduser()


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


ARRAYS = {"x": np.float32, "y": np.int64, "x_test": np.float32, "y_test": np.int64}
SIGNAL_LENGTH = 40
CLASSES = 10


def damage(arrays: dict[str, np.ndarray], args: dict[str, Any]) -> str | None:
    """Why cached arrays cannot be the generator's output for ``args``, or None."""
    if set(arrays) != set(ARRAYS):
        return f"holds {sorted(arrays)} instead of {sorted(ARRAYS)}"
    n_train, n_test = split_sizes(args)
    shapes = {
        "x": (n_train, SIGNAL_LENGTH),
        "y": (n_train,),
        "x_test": (n_test, SIGNAL_LENGTH),
        "y_test": (n_test,),
    }
    for key, dtype in ARRAYS.items():
        a = arrays[key]
        if a.dtype != dtype or a.shape != shapes[key]:
            want = f"{np.dtype(dtype)}{list(shapes[key])}"
            return f"{key} is {a.dtype}{list(a.shape)}, expected {want}"
    if not (np.isfinite(arrays["x"]).all() and np.isfinite(arrays["x_test"]).all()):
        return "signals hold NaN or infinite values"
    labels = np.concatenate([arrays["y"], arrays["y_test"]])
    if labels.min() < 0 or labels.max() >= CLASSES:
        return f"labels outside 0..{CLASSES - 1}"
    return None


def read_cache(path: Path, args: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The cached arrays if ``path`` holds a sound copy; a damaged file is named in a warning."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        why = damage(arrays, args)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        why = f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if why is None:
        return arrays
    warnings.warn(f"data cache {path} is damaged: {why}; generating the data again", stacklevel=3)
    return None


def write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Cache the arrays atomically (safe with many ranks); if that fails, say so and go on."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        warnings.warn(
            f"cannot write the data cache {path} ({exc.strerror or exc}): the data is kept in "
            "memory only and generated again by the next process",
            stacklevel=3,
        )


def load_or_generate(cache_dir: Path, num_samples: int, data_seed: int) -> dict[str, np.ndarray]:
    """Read the cached arrays, or generate (and cache) them when absent or damaged."""
    args = generation_args(num_samples, data_seed)
    path = cache_path(cache_dir, args)
    arrays = read_cache(path, args)
    if arrays is None:
        arrays = generate(args)
        write_cache(path, arrays)
    return arrays


class MNIST1DWorkload(Workload):
    """Shared data handling for the MNIST-1D models."""

    config: MNIST1DConfig

    def data_key(self) -> tuple:
        # The MLP and the CNN train on the same generated data.
        c = self.config
        return ("mnist1d", c.num_samples, c.data_seed, c.validation_samples, str(self.cache_dir))

    def num_train(self) -> int:
        generated = split_sizes(generation_args(self.config.num_samples, self.config.data_seed))
        return generated[0] - self.config.validation_samples

    def sample_shape(self) -> tuple[int, ...]:
        return (SIGNAL_LENGTH,)

    def load_data(self) -> Data:
        c = self.config
        a = load_or_generate(self.cache_dir or DEFAULT_CACHE, c.num_samples, c.data_seed)
        x, y = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
        test_x, test_y = torch.from_numpy(a["x_test"]), torch.from_numpy(a["y_test"])
        if not c.validation_samples:
            return Data(x, y, test_x, test_y)
        cut = len(x) - c.validation_samples  # the generator's samples are already shuffled
        return Data(x[:cut], y[:cut], x[cut:], y[cut:], test_x, test_y)


class MNIST1DMLP(MNIST1DWorkload):
    """The MLP baseline of the MNIST-1D paper: 40-256-256-10."""

    Config = MNIST1DMLPConfig

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

    Config = MNIST1DCNNConfig

    def build_model(self) -> nn.Module:
        return _Conv1DNet()
