"""ResNet-18 on 32x32x3 images: synthetic by default, CIFAR-10 from a local binary copy.

The network is the usual CIFAR adaptation of ResNet-18 (He et al. 2016): a 3x3 stem without
max-pooling, four stages of two basic blocks (64, 128, 256, 512 channels at ``width=64``), global
average pooling and a linear classifier: about 11.2 M parameters, whose gradients fill several
DDP buckets. Images are kept as uint8 (4x less memory than float) and normalised by the model.

Real data: ``data_root`` is a local copy of the *binary* CIFAR-10 distribution
(``cifar-10-batches-bin``: data_batch_1..5.bin, test_batch.bin; each record is one label byte
followed by 3072 pixel bytes), read with numpy. It is never downloaded, and the python-pickled
distribution is not read (no pickle).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from dpsuite.workloads.base import Data, Workload, train_share
from dpsuite.workloads.configs.cifar_resnet import (
    TEST_FILE,
    TRAIN_FILES,
    CIFARResNetConfig,
    find_cifar_bin,
)

IMAGE_SHAPE = (3, 32, 32)
RECORD_BYTES = 1 + 3 * 32 * 32

CIFAR_MEAN = (125.3, 123.0, 113.9)
CIFAR_STD = (63.0, 62.1, 66.7)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 inputs; takes uint8 images and normalises them itself."""

    def __init__(self, width: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        stages, cin = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            cout = width * 2**i
            stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(cin, num_classes)
        # Plain constants, not buffers: DDP would broadcast buffers every step.
        self.mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        w = self.head.weight
        x = (x.to(w.dtype) - self.mean.to(w)) / self.std.to(w)
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def read_cifar_bin(files: list[Path]) -> tuple[Tensor, Tensor]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) int64 from CIFAR-10 binary batch files."""
    images, labels = [], []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        if raw.size == 0 or raw.size % RECORD_BYTES:
            raise ValueError(f"{f} is not a CIFAR-10 binary batch ({raw.size} bytes)")
        records = raw.reshape(-1, RECORD_BYTES)
        labels.append(records[:, 0].astype(np.int64))
        images.append(records[:, 1:].reshape(-1, *IMAGE_SHAPE))
    y = torch.from_numpy(np.concatenate(labels))
    if int(y.max()) > 9:
        raise ValueError(f"labels above 9 in {files[0].parent}: not CIFAR-10 binary batches")
    return torch.from_numpy(np.concatenate(images)), y


def synthetic_images(num: int, classes: int, seed: int) -> tuple[Tensor, Tensor]:
    """Learnable stand-in data: a smooth random template per class plus pixel noise, as uint8."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(classes, 3, 4, 4, generator=g)
    templates = nn.functional.interpolate(coarse, size=IMAGE_SHAPE[1:], mode="bilinear")
    y = torch.randint(0, classes, (num,), generator=g)
    noise = torch.randn(num, *IMAGE_SHAPE, generator=g) * 0.5
    x = (templates[y] * 0.15 + 0.45 + noise).clamp(0, 1) * 255
    return x.round().to(torch.uint8), y


class CIFARResNet(Workload):
    """ResNet-18 on CIFAR-10 (local binary copy) or on synthetic 32x32x3 images."""

    Config = CIFARResNetConfig
    config: CIFARResNetConfig

    @property
    def data_dir(self) -> Path | None:
        root = self.config.data_root
        return find_cifar_bin(Path(root).expanduser()) if root else None

    def data_key(self) -> tuple:
        c = self.config
        if c.data_root:
            return ("cifar10", str(self.data_dir))
        return ("cifar_synthetic", c.num_samples, c.data_seed)

    def sample_shape(self) -> tuple[int, ...]:
        return (3, 32, 32)

    def build_model(self) -> nn.Module:
        return ResNet18(self.config.width)

    def num_train(self) -> int:
        if self.data_dir is not None:
            return sum((self.data_dir / f).stat().st_size // RECORD_BYTES for f in TRAIN_FILES)
        return train_share(self.config.num_samples)

    def load_data(self) -> Data:
        if self.data_dir is not None:
            train_x, train_y = read_cifar_bin([self.data_dir / f for f in TRAIN_FILES])
            eval_x, eval_y = read_cifar_bin([self.data_dir / TEST_FILE])
            return Data(train_x, train_y, eval_x, eval_y)
        x, y = synthetic_images(self.config.num_samples, self.classes, self.config.data_seed)
        n_train = train_share(self.config.num_samples)  # 80 % train / 20 % eval, as for MNIST-1D
        return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
