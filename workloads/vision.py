"""Any torchvision classification model (ResNet-50, ViT-B/16, ...) at ImageNet-like sizes.

``arch`` is a name of ``torchvision.models.list_models(torchvision.models)``; the model is built
without weights (nothing is downloaded) for ``classes`` classes. Images are uint8 (4x less
memory than float) and normalised inside the model with ImageNet's mean and std.

Data is what throughput benchmarks use (Horovod's synthetic benchmark, DeepLearningExamples'
``--data-backend synthetic``): uniform random images and labels, generated once in memory and
copied to the device once, so no input pipeline is measured and accuracy is not meaningful.
``data_root`` reads a local ImageFolder directory instead (a subfolder of images per class; never
downloaded) as Datasets: each image is decoded and transformed when a loader worker takes it
(RandomResizedCrop and a flip for training, resize and centre crop for evaluation; see
``dpsuite.workloads.image_folder``), so the input pipeline is part of the measured run and only
the file names are held in memory.

torchvision is an optional dependency (``pip install 'dpsuite[vision]'``); without it this
workload refuses to start with one line saying so.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from dpsuite.workloads.base import Data, Datasets, Workload, train_share
from dpsuite.workloads.configs.vision import TorchvisionConfig
from dpsuite.workloads.image_folder import ImageList, split_image_folder

IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


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


class TorchvisionWorkload(Workload):
    """Image classification with a torchvision model."""

    name: ClassVar[str] = "torchvision"
    worker_imports = ("torchvision",)  # imported where the model is built
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

    @cached_property
    def image_list(self) -> ImageList:
        """data_root's files, listed once per workload (nothing decoded)."""
        return ImageList(Path(str(self.config.data_root)).expanduser())

    def num_train(self) -> int:
        c = self.config
        if c.data_root:
            return train_share(min(c.num_samples, len(self.image_list)))
        return train_share(c.num_samples)

    def holds_data_in_memory(self) -> bool:
        return not self.config.data_root

    def sample_shape(self) -> tuple[int, ...]:
        return (3, self.config.image_size, self.config.image_size)

    def build_model(self) -> nn.Module:
        import torchvision

        c = self.config
        kwargs: dict = {"weights": None, "num_classes": c.num_classes}
        if c.arch.startswith("vit_"):
            kwargs["image_size"] = c.image_size  # a ViT's position embedding fixes its size
        if c.arch in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=True)  # one output: the logits
        return Normalized(torchvision.models.get_model(c.arch, **kwargs))

    def load_data(self) -> Data | Datasets:
        c = self.config
        if c.data_root:
            images = self.image_list
            if len(images.classes) > c.num_classes:
                raise ValueError(
                    f"data_root {c.data_root} has {len(images.classes)} classes, more than "
                    f"workload.num_classes={c.num_classes}"
                )
            train, evaluate = split_image_folder(images, c.image_size, c.num_samples, c.data_seed)
            return Datasets(train, evaluate)
        x, y = random_images(c.num_samples, c.image_size, c.num_classes, c.data_seed)
        n_train = train_share(len(x))
        return Data(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
