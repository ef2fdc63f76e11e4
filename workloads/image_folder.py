"""An ImageFolder tree (a subfolder of images per class) read lazily, one sample at a time.

The files are listed once (names only, nothing decoded); each ``__getitem__`` opens its file with
PIL, decodes it and applies the usual ImageNet transforms, in whichever process asks for it (a
DataLoader's worker): for training RandomResizedCrop (scale 0.08-1, aspect 3/4-4/3, bilinear)
and a horizontal flip with probability 1/2; for evaluation a resize of the shorter side to
size / 0.875 (256 for 224) and a centre crop. Samples are uint8 CHW tensors: the model
normalises them (``dpsuite.workloads.vision.Normalized``).

Augmentation is seeded per sample, from (seed, epoch, index), not from a process's random state:
a sample's crop and flip in an epoch are the same whichever rank or loader worker decodes it, so
runs repeat exactly and N workers see what one process with the N x batch sees. The epoch lives
in shared memory, so loader workers forked before ``set_epoch`` (persistent ones) see it too.

PIL and torch only (no torchvision): the same as torchvision's ``ImageFolder`` with
``RandomResizedCrop`` + ``RandomHorizontalFlip``, or ``Resize`` + ``CenterCrop``, in its
listing order (classes sorted, files sorted) and crop-parameter rule.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
CROP_SCALE = (0.08, 1.0)  # of the image's area
CROP_RATIO = (3 / 4, 4 / 3)  # width / height
EVAL_CROP_SHARE = 0.875  # the centre crop's side over the resized shorter side (224 of 256)


class ImageList:
    """The files of an ImageFolder tree and their labels, as numpy arrays: loader workers
    forked from a rank read them without touching Python objects' reference counts (a list of
    str would be copied page by page into every worker)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        paths: list[str] = []
        labels: list[int] = []
        for label, name in enumerate(self.classes):
            for dirpath, dirnames, files in os.walk(root / name, followlinks=True):
                dirnames.sort()
                for f in sorted(files):
                    if f.lower().endswith(IMAGE_EXTENSIONS):
                        paths.append(os.path.relpath(os.path.join(dirpath, f), root))
                        labels.append(label)
        self.paths = np.array([p.encode() for p in paths], dtype=bytes)
        self.labels = np.array(labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.labels)


def crop_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """RandomResizedCrop's region (left, top, width, height): 10 tries at a random area share
    and log-uniform aspect ratio, else the centre crop at the nearest allowed ratio."""
    area = width * height
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * ratio))
        h = round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif ratio > CROP_RATIO[1]:
        w, h = round(height * CROP_RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def train_view(img: Image.Image, size: int, rng: np.random.Generator) -> Image.Image:
    """A random resized crop at ``size`` x ``size``, flipped with probability 1/2."""
    left, top, w, h = crop_box(img.width, img.height, rng)
    out = img.resize((size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
    return out.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else out


def eval_view(img: Image.Image, size: int) -> Image.Image:
    """The shorter side resized to size / 0.875, then the centre ``size`` x ``size``."""
    short = round(size / EVAL_CROP_SHARE)
    scale = short / min(img.width, img.height)
    w, h = max(size, round(img.width * scale)), max(size, round(img.height * scale))
    img = img.resize((w, h), Image.Resampling.BILINEAR)
    left, top = (w - size) // 2, (h - size) // 2
    return img.crop((left, top, left + size, top + size))


def chw_uint8(img: Image.Image) -> Tensor:
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).contiguous()


class ImageFiles(Dataset):
    """Samples ``indices`` of an ``ImageList``, decoded when asked for: (uint8 image, label)."""

    def __init__(
        self, images: ImageList, indices: np.ndarray, size: int, augment: bool, seed: int
    ) -> None:
        self.root, self.size, self.augment, self.seed = images.root, size, augment, seed
        self.paths, self.labels = images.paths[indices], images.labels[indices]
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose crops and flips the next samples get."""
        self._epoch[0] = epoch

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        with Image.open(self.root / self.paths[index].decode()) as f:
            img = f.convert("RGB")
        if self.augment:
            rng = np.random.default_rng((self.seed, int(self._epoch[0]), index))
            img = train_view(img, self.size, rng)
        else:
            img = eval_view(img, self.size)
        return chw_uint8(img), int(self.labels[index])


def split_image_folder(
    images: ImageList, size: int, limit: int, seed: int
) -> tuple[ImageFiles, ImageFiles]:
    """Train (augmented) and eval (centre-cropped) datasets: up to ``limit`` images in a seeded
    random order (so that the eval split has every class), 80 % train and 20 % eval."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(images), generator=g)[:limit].numpy()
    cut = len(order) * 4 // 5
    return (
        ImageFiles(images, order[:cut], size, augment=True, seed=seed),
        ImageFiles(images, order[cut:], size, augment=False, seed=seed),
    )
