"""The ResNet-18 workload's config and its check of a local CIFAR-10 copy
(``dpsuite.workloads.cifar_resnet`` builds the model and reads the data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dpsuite.workloads.configs.base import WorkloadConfig

TRAIN_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)]
TEST_FILE = "test_batch.bin"
# Per-channel mean and std of CIFAR-10's training images, on the 0..255 scale.


def find_cifar_bin(root: Path) -> Path:
    """The directory holding the binary batches: ``root`` or ``root/cifar-10-batches-bin``."""
    for d in (root, root / "cifar-10-batches-bin"):
        if all((d / f).is_file() for f in [*TRAIN_FILES, TEST_FILE]):
            return d
    if (root / "cifar-10-batches-py").exists() or (root / "data_batch_1").exists():
        raise ValueError(
            f"{root} holds the python (pickled) CIFAR-10; point data_root at the binary "
            "version (cifar-10-batches-bin), which is read without pickle"
        )
    raise ValueError(
        f"data_root {root} does not hold CIFAR-10 binary batches "
        f"({', '.join(TRAIN_FILES[:1])} ... {TEST_FILE}); it is never downloaded"
    )


@dataclass
class CIFARResNetConfig(WorkloadConfig):
    """ResNet-18 on 32x32x3 images: synthetic by default, CIFAR-10 from a local binary copy."""

    class_path: ClassVar[str] = "dpsuite.workloads.cifar_resnet:CIFARResNet"
    small: ClassVar[Mapping[str, Any]] = {"width": 4, "num_samples": 200}

    name: str = "cifar_resnet"
    num_samples: int = field(default=5000, metadata={"ge": 20})
    """Synthetic images, 80 % train / 20 % eval (ignored with data_root)."""
    data_seed: int = field(default=42, metadata={"ge": 0})
    """Seed of the synthetic images."""
    width: int = field(default=64, metadata={"ge": 1})
    """Channels of the first stage (64, 128, 256, 512 at 64); smaller is faster."""
    data_root: str | None = None
    """A local copy of CIFAR-10's binary batches (cifar-10-batches-bin); never downloaded."""
    base_lr: float = 0.1
    base_batch: int = 128
    epochs: int = 30
    target_acc: float = 0.90

    def check(self) -> None:
        if self.data_root:
            find_cifar_bin(Path(self.data_root).expanduser())
