"""Workloads whose data are torch Datasets, run by import path (``tests.dataset_workloads:...``).

* ``MLPOnDatasets``: the built-in mnist1d_mlp with its very tensors handed over as Datasets
  (so both data forms can be held to the same parameters).
* ``NpyRegression``: a team's job as it comes: one ``.npy`` file per sample on disk, dict
  batches, its own loss (mean squared error), no accuracy, scored by its eval loss (lower is
  better).
* ``Faulty``: NpyRegression with one fault chosen by ``fault`` (a sample that raises, batches
  of the wrong structure, an empty split, a loader worker that dies or hangs).
* ``WhoLoads``: NpyRegression whose loader workers each note, once, their split, pid and
  when they were forked, in ``<data_dir>/loaders.txt``.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from dpsuite.workloads import Workload, WorkloadConfig
from dpsuite.workloads.base import Data, Datasets
from dpsuite.workloads.mnist_1d import MNIST1DMLP


class MLPOnDatasets(MNIST1DMLP):
    """mnist1d_mlp, its tensors given as Datasets."""

    def load_data(self) -> Datasets:  # type: ignore[override]
        d = super().load_data()
        test = TensorDataset(d.test_x, d.test_y) if d.test_x is not None else None
        return Datasets(
            TensorDataset(d.train_x, d.train_y), TensorDataset(d.eval_x, d.eval_y), test
        )


@dataclass
class NpyRegressionConfig(WorkloadConfig):
    """A linear regression read from one .npy file per sample."""

    name: str = "npy_regression"
    data_dir: str = ""
    """Where the sample files are (written there once when missing)."""
    num_samples: int = field(default=400, metadata={"ge": 1})
    """Samples written: 80 % train, 20 % eval."""
    dims: int = field(default=8, metadata={"ge": 1})
    """Inputs per sample."""
    fault: str = ""
    """(Faulty only) the fault to inject."""
    base_lr: float = 0.05
    base_batch: int = 16
    epochs: int = 4
    target_loss: float = 0.05


class NpyDir(Dataset):
    """Samples of a directory: ``<i>.npy`` holds inputs then the target."""

    def __init__(self, root: Path, indices: range) -> None:
        self.root, self.indices = root, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        row = np.load(self.root / f"{self.indices[i]}.npy")
        return {"x": torch.from_numpy(row[:-1]), "y": torch.tensor(row[-1])}


def write_samples(root: Path, num: int, dims: int) -> None:
    if (root / "done").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(0)
    w = g.normal(size=dims)
    for i in range(num):
        x = g.normal(size=dims)
        np.save(root / f"{i}.npy", np.append(x, x @ w + 0.1 * g.normal()).astype(np.float32))
    (root / "done").write_text("")


class NpyRegression(Workload):
    Config = NpyRegressionConfig
    config: NpyRegressionConfig
    target_metric = "eval_loss"

    def num_train(self) -> int:
        return self.config.num_samples * 4 // 5

    def build_model(self) -> nn.Module:
        return nn.Linear(self.config.dims, 1)

    def load_data(self) -> Datasets:
        root = Path(self.config.data_dir)
        write_samples(root, self.config.num_samples, self.config.dims)
        cut = self.num_train()
        return Datasets(NpyDir(root, range(cut)), NpyDir(root, range(cut, self.config.num_samples)))

    def batch_loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        return nn.functional.mse_loss(model(batch["x"]).squeeze(-1), batch["y"])

    def batch_metrics(self, model: nn.Module, batch: dict):
        return self.batch_loss(model, batch), None, int(batch["y"].shape[0])


class Broken(NpyDir):
    def __init__(self, root: Path, indices: range, fault: str) -> None:
        super().__init__(root, indices)
        self.fault = fault

    def __getitem__(self, i: int):
        if self.fault == "raises" and i == 7:
            raise ValueError("cannot decode this file")
        if self.fault == "structure":
            return "not a tensor"
        if self.fault == "killed" and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        if self.fault == "hangs" and torch.utils.data.get_worker_info() is not None:
            time.sleep(3600)
        return super().__getitem__(i)


class Faulty(NpyRegression):
    def load_data(self) -> Datasets:
        c = self.config
        root = Path(c.data_dir)
        write_samples(root, c.num_samples, c.dims)
        cut = self.num_train()
        train = Broken(root, range(0 if c.fault == "empty" else cut), c.fault)
        return Datasets(train, NpyDir(root, range(cut, c.num_samples)))


class TensorRegression(NpyRegression):
    """NpyRegression's samples as in-memory tensors: float targets, no classes."""

    def load_data(self) -> Data:
        datasets = super().load_data()
        rows = [[ds[i] for i in range(len(ds))] for _, ds in datasets.splits()]
        (tx, ty), (ex, ey) = [
            (torch.stack([r["x"] for r in split]), torch.stack([r["y"] for r in split]))
            for split in rows
        ]
        if self.config.fault == "nan_target":
            ty[3] = float("nan")
        return Data(tx, ty, ex, ey)

    def batch_loss(self, model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(model(x).squeeze(-1), y)

    def batch_metrics(self, model: nn.Module, batch):
        return self.batch_loss(model, batch), None, int(batch[1].shape[0])


class StreamedSamples(IterableDataset):
    """NpyDir's samples as a stream (a reader of shards or a socket would look the same)."""

    def __init__(self, files: NpyDir) -> None:
        self.files = files

    def __iter__(self):
        return (self.files[i] for i in range(len(self.files)))


class NpyStream(NpyRegression):
    """NpyRegression with its train split as an iterable dataset: dpsuite deals its items over
    ranks and loader workers and takes num_train() // global batch steps an epoch."""

    def load_data(self) -> Datasets:
        files = super().load_data()
        return Datasets(StreamedSamples(files.train), files.eval)


class NotedNpyDir(Dataset):
    """An NpyDir whose loader workers each append "split pid start" to ``log`` at their first
    sample (start: the process's start time, in clock ticks since boot)."""

    def __init__(self, files: NpyDir, split: str, log: Path) -> None:
        self.files, self.split, self.log, self.noted = files, split, log, False

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not self.noted and torch.utils.data.get_worker_info() is not None:
            self.noted = True  # in this worker's copy of the dataset
            start = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
            with open(self.log, "a") as f:
                f.write(f"{self.split} {os.getpid()} {start}\n")
        return self.files[i]


class WhoLoads(NpyRegression):
    def load_data(self) -> Datasets:
        files, log = super().load_data(), Path(self.config.data_dir) / "loaders.txt"
        return Datasets(
            NotedNpyDir(files.train, "train", log), NotedNpyDir(files.eval, "eval", log)
        )
