"""Any torchvision classification model (ResNet-50, ViT-B/16, ...) at ImageNet-like sizes.

``arch`` is a name of ``torchvision.models.list_models(torchvision.models)``; the model is built
without weights (nothing is downloaded) for ``classes`` classes. Images are uint8 (4x less
memory than float) and normalised inside the model with ImageNet's mean and std.

Data is what throughput benchmarks use (Horovod's synthetic benchmark, DeepLearningExamples'
``--data-backend synthetic``): uniform random images and labels, generated once in memory and
copied to the device once, so no input pipeline is measured and accuracy is not meaningful.
``data_root`` reads a local ImageFolder directory instead (a subfolder of images per class),
resized and centre-cropped once into memory; never downloaded.

torchvision is an optional dependency (``pip install 'dpsuite[vision]'``); without it this
workload refuses to start with one line saying so.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from workloads.base import Data, Workload, WorkloadConfig, train_share

IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
INSTALL_HINT = "workload=torchvision needs torchvision: pip install 'dpsuite[vision]'"


def torchvision_problem() -> str | None:
    """Why torchvision cannot be used here, or None (an install beside a mismatched torch
    fails on import, not on lookup)."""
    if importlib.util.find_spec("torchvision") is None:
        return f"{INSTALL_HINT} (it is not installed)"
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # e.g. a build for another torch: its C++ ops fail to load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{INSTALL_HINT} (importing it failed: {first})"
    return None


@cache
def architectures() -> tuple[str, ...]:
    """The classification models torchvision offers."""
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


class Normalized(nn.Module):
    """A torchvision model that takes uint8 images and normalises them itself."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        # Plain constants, not buffers: DDP would broadcast buffers every step.
        self.mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        w = next(self.model.parameters())
        x = (x.to(w.dtype) - self.mean.to(w)) / self.std.to(w)
        return self.model(x)


def random_images(num: int, size: int, classes: int, seed: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (num, 3, size, size), generator=g, dtype=torch.uint8)
    return x, torch.randint(0, classes, (num,), generator=g)


def read_image_folder(root: Path, size: int, limit: int, seed: int) -> tuple[Tensor, Tensor]:
    """Up to ``limit`` images of an ImageFolder tree, resized and centre-cropped to ``size``,
    in a seeded random order (so that the eval split has every class)."""
    from torchvision import datasets, transforms

    prepare = transforms.Compose(
        [transforms.Resize(size), transforms.CenterCrop(size), transforms.PILToTensor()]
    )
    folder = datasets.ImageFolder(str(root), transform=prepare)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(folder), generator=g)[:limit].tolist()
    pairs = [folder[i] for i in order]
    return torch.stack([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])


@dataclass
class TorchvisionConfig(WorkloadConfig):
    """A torchvision classification model: random images, or a local ImageFolder."""

    name: str = "torchvision"
    arch: str = "resnet50"
    """A torchvision classification model: resnet50, vit_b_16, efficientnet_b0, ... (built
    without pretrained weights)."""
    image_size: int = field(default=224, metadata={"ge": 8})
    """Image height and width in pixels."""
    num_classes: int = field(default=1000, metadata={"ge": 2})
    """Classes (the random labels' range; with data_root, the folder's classes must fit)."""
    num_samples: int = field(default=2560, metadata={"ge": 10})
    """Images held in memory, 80 % train / 20 % eval (random, or the first of data_root)."""
    data_seed: int = field(default=42, metadata={"ge": 0})
    """Seed of the random images (and of data_root's order)."""
    data_root: str | None = None
    """A local ImageFolder directory (one subfolder of images per class); never downloaded."""
    eval_batch: int = field(default=256, metadata={"ge": 1})
    """Images per forward pass in evaluation."""
    base_lr: float = 0.1
    base_batch: int = 256
    epochs: int = 1
    target_acc: float = 0.76
    weight_decay: float = 1e-4

    def check(self) -> None:
        problem = torchvision_problem()
        if problem:
            raise ValueError(problem)
        if self.arch not in architectures():
            import difflib

            close = difflib.get_close_matches(self.arch, architectures(), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(
                f"workload.arch '{self.arch}' is not a torchvision classification model{hint}; "
                "see torchvision.models.list_models(torchvision.models)"
            )
        if self.data_root and not Path(self.data_root).expanduser().is_dir():
            raise ValueError(f"data_root {self.data_root} is not a directory")


class TorchvisionWorkload(Workload):
    """Image classification with a torchvision model."""

    name: ClassVar[str] = "torchvision"
    Config = TorchvisionConfig
    config: TorchvisionConfig

    @property
    def classes(self) -> int:  # type: ignore[override]
        return self.config.num_classes

    @property
    def synthetic_data(self) -> bool:  # type: ignore[override]
        return not self.config.data_root

    @property
    def eval_chunk(self) -> int:  # type: ignore[override]
        return self.config.eval_batch

    def label(self) -> str:
        return f"{self.config.name}-{self.config.arch}"

    def num_train(self) -> int:
        c = self.config
        if c.data_root:
            from torchvision import datasets

            images = len(datasets.ImageFolder(str(Path(c.data_root).expanduser())))
            return train_share(min(c.num_samples, images))
        return train_share(c.num_samples)

    def build_model(self) -> nn.Module:
        import torchvision

        c = self.config
        kwargs: dict = {"weights": None, "num_classes": c.num_classes}
        if c.arch.startswith("vit_"):
            kwargs["image_size"] = c.image_size  # a ViT's position embedding fixes its size
        if c.arch in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=True)  # one output: the logits
        return Normalized(torchvision.models.get_model(c.arch, **kwargs))

    def load_data(self) -> Data:
        c = self.config
        if c.data_root:
            root = Path(c.data_root).expanduser()
            x, y = read_image_folder(root, c.image_size, c.num_samples, c.data_seed)
        else:
            x, y = random_images(c.num_samples, c.image_size, c.num_classes, c.data_seed)
        n_train = train_share(len(x))
        return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
