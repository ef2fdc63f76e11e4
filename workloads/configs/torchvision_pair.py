"""The torchvision build that matches the installed torch, as one pip command.

torchvision is released in lockstep with torch: for torch 2.x, torchvision 0.(minor + 15).patch
(torch 2.13.0 <-> torchvision 0.28.0). PyPI holds one build per version (CUDA on Linux), so the
build for a CPU, ROCm or other CUDA torch comes from the PyTorch index of that variant; a CUDA
torchvision beside a CPU torch fails on import (``operator torchvision::nms does not exist``).
"""

from __future__ import annotations

import re

INDEX = "https://download.pytorch.org/whl"
TORCHVISION_MINOR_OFFSET = 15  # torchvision 0.15 came with torch 2.0


def torchvision_for(torch_version: str) -> str | None:
    """The torchvision version released with ``torch_version`` (2.13.0+cpu -> 0.28.0), or
    None for a torch this rule does not know (1.x, a malformed version)."""
    match = re.match(r"2\.(\d+)\.(\d+)", torch_version)
    if not match:
        return None
    return f"0.{int(match.group(1)) + TORCHVISION_MINOR_OFFSET}.{match.group(2)}"


def variant(cuda: str | None, hip: str | None) -> str:
    """The PyTorch index's name of a build: cpu, cu128 (CUDA 12.8), rocm6.3 (ROCm 6.3.x)."""
    if cuda:
        return "cu" + "".join(cuda.split(".")[:2])
    if hip:
        return "rocm" + ".".join(hip.split(".")[:2])
    return "cpu"


def install_command(torch_version: str, cuda: str | None, hip: str | None) -> str:
    """The pip command that installs the torchvision matching this torch build."""
    build = variant(cuda, hip)
    wanted = torchvision_for(torch_version)
    pin = f"torchvision=={wanted}" if wanted else "torchvision"
    return f"pip install {pin} --index-url {INDEX}/{build}"


def installed_torch_hint() -> str:
    """Which torchvision to install beside the installed torch, and how (one clause)."""
    import torch

    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    build = variant(cuda, hip)
    command = install_command(torch.__version__, cuda, hip)
    return f"install the build for torch {torch.__version__} ({build}): {command}"
