"""Model FLOPs per training sample, counted by PyTorch, and the utilization they imply (MFU).

The count is PyTorch's own (``torch.utils.flop_counter.FlopCounterMode``: matmuls and
convolutions, forward and backward) on a copy of the model, for a couple of samples, so the
run's model, gradients and random stream are untouched. MFU = achieved model FLOP/s / the peak
the user gives for the accelerator at the run's precision (``hardware.peak_tflops``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def training_flops_per_sample(
    model: nn.Module, loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor], idx: torch.Tensor
) -> float | None:
    """Forward + backward FLOPs per sample of ``loss_of(model, idx)``; None if nothing counted."""
    if len(idx) == 0:
        return None
    replica = copy.deepcopy(model)
    devices = [idx.device] if idx.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), FlopCounterMode(display=False) as counter:
            loss_of(replica, idx).backward()
    except (RuntimeError, ValueError):  # e.g. BatchNorm on a one-sample training set
        return None  # a missing count must never stop a run
    total = counter.get_total_flops()
    return total / len(idx) if total > 0 else None


def utilization(
    flops_per_sample: float | None,
    samples_per_s: float | None,
    devices: int,
    peak_tflops: float | None,
) -> dict[str, float | None]:
    """Model TFLOP/s achieved per device, and ``mfu`` against the device's peak, if given."""
    if not flops_per_sample or not samples_per_s:
        return {"flops_per_sample": flops_per_sample, "model_tflops_per_device": None, "mfu": None}
    per_device = flops_per_sample * samples_per_s / devices / 1e12
    return {
        "flops_per_sample": flops_per_sample,
        "model_tflops_per_device": per_device,
        "mfu": per_device / peak_tflops if peak_tflops else None,
    }
