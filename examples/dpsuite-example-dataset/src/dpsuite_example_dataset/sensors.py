"""A team's job as it usually comes: samples in files on disk, read by a torch Dataset.

Each sample is one ``.npz`` file (a sensor trace and the quantity to predict from it). The
workload hands dpsuite ``Datasets``; dpsuite builds each rank's DataLoader (its sampler, its
workers: ``data.loader_workers``), moves every batch to the device and measures the time a
step waits for it. Batches are dicts; the loss is the workload's own (Huber); there is no
accuracy, so the target is an eval loss, and lower is better.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from dpsuite.workloads import Datasets, Workload, WorkloadConfig


@dataclass
class SensorConfig(WorkloadConfig):
    """Predict a trace's amplitude from the trace, read from one file per sample."""

    name: str = "sensor_regression"
    data_dir: str = ""
    """Where the sample files are; empty: under dpsuite's cache_dir. Written there on first use."""
    num_samples: int = field(default=2000, metadata={"ge": 10})
    """Sample files: 80 % train, 20 % eval."""
    length: int = field(default=64, metadata={"ge": 8})
    """Points per trace."""
    base_lr: float = 0.02
    base_batch: int = 32
    epochs: int = 6
    target_loss: float = field(default=0.02, metadata={"gt": 0})
    """Eval loss (Huber) that counts as reaching the target."""


class SensorFiles(Dataset):
    """``<i>.npz`` files of a directory, each ``{"trace": float32[length], "amplitude": ()}``."""

    def __init__(self, root: Path, indices: range) -> None:
        self.root, self.indices = root, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        with np.load(self.root / f"{self.indices[i]}.npz") as f:
            return {
                "trace": torch.from_numpy(f["trace"]),
                "amplitude": torch.tensor(f["amplitude"]),
            }


def write_files(root: Path, num: int, length: int) -> None:
    """Noisy sine traces of random amplitude and phase (once; a marker says it is whole)."""
    if (root / "complete").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(0)
    t = np.linspace(0, 4 * np.pi, length, dtype=np.float32)
    for i in range(num):
        amplitude = g.uniform(0.5, 2.0)
        trace = amplitude * np.sin(t + g.uniform(0, 2 * np.pi)) + 0.1 * g.normal(size=length)
        np.savez(root / f"{i}.npz", trace=trace.astype(np.float32), amplitude=np.float32(amplitude))
    (root / "complete").write_text(f"{num}\n")


class SensorRegression(Workload):
    Config = SensorConfig
    config: SensorConfig
    target_metric = "eval_loss"  # no accuracy here: the run reaches its target when the loss falls

    def data_root(self) -> Path:
        if self.config.data_dir:
            return Path(self.config.data_dir).expanduser()
        base = self.cache_dir or Path.home() / ".cache" / "dpsuite"
        return base / f"sensors-{self.config.num_samples}x{self.config.length}"

    def num_train(self) -> int:
        return self.config.num_samples * 4 // 5

    def build_model(self) -> nn.Module:
        n = self.config.length
        return nn.Sequential(nn.Linear(n, 64), nn.ReLU(), nn.Linear(64, 1))

    def load_data(self) -> Datasets:
        root = self.data_root()
        write_files(root, self.config.num_samples, self.config.length)
        cut = self.num_train()
        return Datasets(
            train=SensorFiles(root, range(cut)),
            eval=SensorFiles(root, range(cut, self.config.num_samples)),
        )

    def batch_loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        predicted = model(batch["trace"]).squeeze(-1)
        return nn.functional.huber_loss(predicted, batch["amplitude"])

    def batch_metrics(self, model: nn.Module, batch: dict[str, torch.Tensor]):
        # The mean loss and how many samples it averages; None: this workload has no accuracy.
        return self.batch_loss(model, batch), None, int(batch["amplitude"].shape[0])
