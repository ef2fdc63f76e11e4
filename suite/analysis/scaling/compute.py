"""Compute time of one training step on one worker, measured or from a hardware profile.

Measured: the step time of ``workers=1`` runs, linear in the per-worker batch (a fixed cost plus
a cost per sample). From a profile: FLOPs per sample / (peak FLOP/s x MFU), or a single-GPU
throughput someone measured. The backward pass, during which DDP's all-reduces can run, is taken
to be 2/3 of the step: it costs twice the FLOPs of the forward pass (Kaplan et al. 2020, sec. 2.1:
2N forward, 4N backward per token, the same ratio for any dense layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BACKWARD_FRACTION = 2 / 3


@dataclass(frozen=True)
class ComputeModel:
    """Step time without communication: ``fixed_s + per_sample_s * batch``."""

    fixed_s: float
    per_sample_s: float
    backward_fraction: float = BACKWARD_FRACTION

    def step_s(self, batch: int) -> float:
        return self.fixed_s + self.per_sample_s * batch

    def backward_s(self, batch: int) -> float:
        return self.backward_fraction * self.step_s(batch)


def from_throughput(samples_per_s: float) -> ComputeModel:
    """A single worker's measured throughput, taken as proportional to the batch."""
    return ComputeModel(0.0, 1.0 / samples_per_s)


def from_flops(flops_per_sample: float, peak_tflops: float, mfu: float) -> ComputeModel:
    """``flops_per_sample`` (forward + backward) at ``mfu`` of the accelerator's peak."""
    return ComputeModel(0.0, flops_per_sample / (peak_tflops * 1e12 * mfu))


def fit_compute_model(single: pd.DataFrame) -> ComputeModel:
    """From workers=1 runs: (per_worker_batch, step_time_s) pairs."""
    pts = single[["per_worker_batch", "step_time_s"]].dropna().groupby("per_worker_batch").median()
    if pts.empty:
        raise ValueError("no workers=1 run with a step time")
    b, t = pts.index.to_numpy(float), pts["step_time_s"].to_numpy(float)
    if len(b) == 1:
        return ComputeModel(0.0, t[0] / b[0])
    slope, intercept = np.polyfit(b, t, 1)
    if slope <= 0:  # noise on a flat curve: fall back to proportional
        return ComputeModel(0.0, float(np.median(t / b)))
    return ComputeModel(max(float(intercept), 0.0), float(slope))
