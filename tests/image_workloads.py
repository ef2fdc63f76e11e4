"""An image workload on a local ImageFolder tree without torchvision, run by import path
(``tests.image_workloads:SmallCNN``): the lazy ``dpsuite.workloads.image_folder`` datasets the
torchvision workload uses, under a CNN small enough for CPU tests; and a generator of small JPEG
folders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from torch import Tensor, nn

from dpsuite.workloads import Workload, WorkloadConfig
from dpsuite.workloads.base import Datasets, train_share
from dpsuite.workloads.image_folder import ImageList, split_image_folder


@dataclass
class SmallCNNConfig(WorkloadConfig):
    name: str = "small_cnn"
    data_root: str = ""
    image_size: int = field(default=16, metadata={"ge": 8})
    num_classes: int = field(default=3, metadata={"ge": 2})
    num_samples: int = field(default=1000, metadata={"ge": 10})
    data_seed: int = 42
    base_lr: float = 0.05
    base_batch: int = 16
    epochs: int = 2
    target_acc: float = 0.9


class SmallCNN(Workload):
    """Two convolutions and a linear layer over uint8 images, normalised in the model."""

    Config = SmallCNNConfig
    config: SmallCNNConfig

    @property
    def classes(self) -> int:  # type: ignore[override]
        return self.config.num_classes

    def num_train(self) -> int:
        images = ImageList(Path(self.config.data_root))
        return train_share(min(self.config.num_samples, len(images)))

    def holds_data_in_memory(self) -> bool:
        return False

    def sample_shape(self) -> tuple[int, ...]:
        return (3, self.config.image_size, self.config.image_size)

    def build_model(self) -> nn.Module:
        return TinyConvNet(self.config.num_classes)

    def load_data(self) -> Datasets:
        c = self.config
        images = ImageList(Path(c.data_root))
        return Datasets(*split_image_folder(images, c.image_size, c.num_samples, c.data_seed))


class TinyConvNet(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        w = self.layers[0].weight
        return self.layers(x.to(w.dtype) / 255.0 - 0.5)  # uint8 images, scaled here


COLORS = ((220, 40, 40), (40, 200, 40), (40, 40, 220), (200, 200, 40))


def write_jpeg_folder(root: Path, classes: int = 3, per_class: int = 20, seed: int = 0) -> Path:
    """``classes`` subfolders of ``per_class`` small noisy JPEGs of varied sizes, each class
    its own colour (so a small model can learn them)."""
    g = np.random.default_rng(seed)
    for c in range(classes):
        folder = root / f"class_{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            h, w = int(g.integers(20, 40)), int(g.integers(20, 40))
            pixels = np.clip(g.normal(COLORS[c], 30, size=(h, w, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=90)
    return root
