"""Model FLOPs per training sample, counted by PyTorch, and the utilization they imply (MFU).

The count is PyTorch's own (``torch.utils.flop_counter.FlopCounterMode``: matmuls and
convolutions, forward and backward) for a couple of samples, taken in eval mode and with
``torch.autograd.grad``: no BatchNorm statistic, ``.grad`` or random number of the run is
touched (the counted ops are the same in both modes). MFU = achieved model FLOP/s / the peak
the user gives for the accelerator at the run's precision (``hardware.peak_tflops``), or else the
datasheet peak of a known GPU (``PEAK_TFLOPS``); none on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dpsuite.workloads import batch_tree


def training_flops_per_sample(
    model: nn.Module, loss_of: Callable[[nn.Module, Any], torch.Tensor], batch: Any
) -> float | None:
    """Forward + backward FLOPs per sample of ``loss_of(model, batch)``; None if nothing
    counted."""
    n = batch_tree.size(batch)
    if n == 0:
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter:
            torch.autograd.grad(loss_of(model, batch), params, allow_unused=True)
    except (RuntimeError, ValueError):
        return None  # a missing count must never stop a run
    finally:
        model.train(was_training)
    total = counter.get_total_flops()
    return total / n if total > 0 else None


# Datasheet peaks, dense (no sparsity), TFLOP/s: bf16/fp16 on Tensor Cores, and fp32 without
# TF32 (PyTorch's default for matmuls). The first name contained in the device's name wins.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0}),
    ("H100", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("GH200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    ("A10G", {"bf16": 70.0, "fp16": 70.0, "fp32": 31.2}),
    ("L40S", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),
)


def known_peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The datasheet peak of a known GPU at ``precision``, or None."""
    if not device_name:
        return None
    for model, peaks in PEAK_TFLOPS:
        if model in device_name:
            return peaks.get(precision)
    return None


def utilization(
    flops_per_sample: float | None,
    samples_per_s: float | None,
    devices: int,
    peak_tflops: float | None,
) -> dict[str, float | None]:
    """Model TFLOP/s achieved per device, and ``mfu`` against the device's peak, if given."""
    empty = {"model_tflops_per_device": None, "mfu": None, "peak_tflops": peak_tflops}
    if not flops_per_sample or not samples_per_s:
        return {"flops_per_sample": flops_per_sample, **empty}
    per_device = flops_per_sample * samples_per_s / devices / 1e12
    return {
        "flops_per_sample": flops_per_sample,
        "model_tflops_per_device": per_device,
        "mfu": per_device / peak_tflops if peak_tflops else None,
        "peak_tflops": peak_tflops,
    }
