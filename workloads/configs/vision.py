"""The torchvision workload's config, and whether torchvision can be used here
(``dpsuite.workloads.vision`` builds the model and the images)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from dpsuite.workloads.configs.base import WorkloadConfig

INSTALL_HINT = "workload=torchvision needs the torchvision that matches torch"


def torchvision_problem() -> str | None:
    """Why torchvision cannot be used here, or None (an install beside a mismatched torch
    fails on import, not on lookup)."""
    from dpsuite.workloads.configs.torchvision_pair import installed_torch_hint

    if importlib.util.find_spec("torchvision") is None:
        return f"{INSTALL_HINT}, which is not installed: {installed_torch_hint()}"
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # e.g. a build for another torch: its C++ ops fail to load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{INSTALL_HINT} (importing it failed: {first}); {installed_torch_hint()}"
    return None


@cache
def architectures() -> tuple[str, ...]:
    """The classification models torchvision offers."""
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


# torchvision's classification models (0.20): their names where torchvision is not installed.
KNOWN_ARCHITECTURES = (
    *("alexnet", "googlenet", "inception_v3", "maxvit_t"),
    *(f"convnext_{s}" for s in ("tiny", "small", "base", "large")),
    *(f"densenet{d}" for d in (121, 161, 169, 201)),
    *(f"efficientnet_b{i}" for i in range(8)),
    *(f"efficientnet_v2_{s}" for s in "sml"),
    *(f"mnasnet{w}" for w in ("0_5", "0_75", "1_0", "1_3")),
    *("mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small"),
    *(f"regnet_x_{f}" for f in ("400mf", "800mf", "1_6gf", "3_2gf", "8gf", "16gf", "32gf")),
    *(f"regnet_y_{f}" for f in ("400mf", "800mf", "1_6gf", "3_2gf", "8gf", "16gf", "32gf")),
    "regnet_y_128gf",
    *(f"resnet{d}" for d in (18, 34, 50, 101, 152)),
    *("resnext50_32x4d", "resnext101_32x8d", "resnext101_64x4d"),
    *(f"shufflenet_v2_x{w}" for w in ("0_5", "1_0", "1_5", "2_0")),
    *("squeezenet1_0", "squeezenet1_1"),
    *(f"swin_{s}" for s in "tsb"),
    *(f"swin_v2_{s}" for s in "tsb"),
    *(f"vgg{d}{bn}" for d in (11, 13, 16, 19) for bn in ("", "_bn")),
    *("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"),
    *("wide_resnet50_2", "wide_resnet101_2"),
)


def known_architectures() -> tuple[str, ...]:
    """The classification models torchvision offers: the installed one's, else 0.20's."""
    return architectures() if torchvision_problem() is None else KNOWN_ARCHITECTURES


@dataclass
class TorchvisionConfig(WorkloadConfig):
    """A torchvision classification model: random images, or a local ImageFolder."""

    class_path: ClassVar[str] = "dpsuite.workloads.vision:TorchvisionWorkload"
    small: ClassVar[Mapping[str, Any]] = {
        "arch": "resnet18",
        "image_size": 32,
        "num_classes": 10,
        "num_samples": 40,
    }

    name: str = "torchvision"
    arch: str = "resnet50"
    """A torchvision classification model: resnet50, vit_b_16, efficientnet_b0, ... (built
    without pretrained weights)."""
    image_size: int = field(default=224, metadata={"ge": 8})
    """Image height and width in pixels."""
    num_classes: int = field(default=1000, metadata={"ge": 2})
    """Classes (the random labels' range; with data_root, the folder's classes must fit)."""
    num_samples: int = field(default=2560, metadata={"ge": 10})
    """Images, 80 % train / 20 % eval: random ones held in memory, or at most this many of
    data_root (in data_seed's order), decoded while training."""
    data_seed: int = field(default=42, metadata={"ge": 0})
    """Seed of the random images (with data_root: of the images' order and their crops)."""
    data_root: str | None = None
    """A local ImageFolder directory (one subfolder of images per class), each image decoded,
    randomly cropped and flipped when taken; never downloaded."""
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
