"""Planning a workload on hardware you do not have: a profile plus the workload's counts.

Parameters and FLOPs per sample come from the user or from the workload's own runs (each run
counts its FLOPs with PyTorch's counter: ``flops_per_sample`` in run.json). Compute is a measured
single-GPU throughput if given, else FLOPs / (peak x MFU) at the profile's peak for the
precision. A FLOP count is never guessed: 6 x parameters is the FLOPs of one *token* of a
transformer, not of one sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.compute import from_flops, from_throughput
from dpsuite.analysis.scaling.fit import Fit
from dpsuite.analysis.scaling.model import (
    BYTES_PER_PARAM,
    GRAD_DTYPE_BYTES,
    MIB,
    Overheads,
    ScalingModel,
)
from dpsuite.analysis.scaling.profiles import Profile
from dpsuite.analysis.scaling.tensors import tensor_numels
from dpsuite.errors import UserError


@dataclass(frozen=True)
class Workload:
    """What the model needs of a workload: its name, parameters, FLOPs per sample if known, and
    its parameter tensors' sizes in registration order if known."""

    name: str
    params: float
    flops_per_sample: float | None
    tensors: tuple[int, ...] = ()


def counted_workload(runs: pd.DataFrame, name: str) -> Workload:
    """Parameters and FLOPs per sample as the workload's runs counted them."""
    mine = runs[runs["workload"] == name] if "workload" in runs else runs.iloc[0:0]
    if mine.empty:
        there = ", ".join(sorted(runs["workload"].dropna().unique())) if "workload" in runs else ""
        raise UserError(f"no runs of workload '{name}' there (workloads: {there or 'none'})")
    params = mine.get("num_params", pd.Series(dtype=float)).dropna()
    if params.empty:
        raise UserError(f"the runs of {name} recorded no parameter count")
    flops = mine.get("flops_per_sample", pd.Series(dtype=float)).dropna()
    flops_per_sample = float(flops.median()) if len(flops) else None
    return Workload(name, float(params.iloc[0]), flops_per_sample, tuple(tensor_numels(mine) or ()))


def resolve_workload(
    runs: pd.DataFrame | None, name: str | None, params: float | None, flops: float | None
) -> Workload:
    """Given by hand, or counted by the named workload's ``runs``; numbers given by hand win."""
    if name is None:
        return Workload("by hand", params or 0.0, flops)
    counted = counted_workload(runs if runs is not None else pd.DataFrame(), name)
    return Workload(
        name,
        params if params is not None else counted.params,
        flops if flops is not None else counted.flops_per_sample,
        counted.tensors if params is None else (),  # a count by hand replaces the model's
    )


def _flops(workload: Workload) -> float:
    if workload.flops_per_sample is None:
        raise UserError(
            f"FLOPs per sample unknown ({workload.name}): give --flops-per-sample or "
            "--samples-per-s, or --workload with a results directory whose runs counted it "
            "(run.json: flops_per_sample). 6 x parameters is not a substitute: it is the FLOPs "
            "of one token of a transformer, not of one sample"
        )
    return workload.flops_per_sample


def _peak(profile: Profile, precision: str | None, tflops: float | None) -> float:
    if tflops is not None:
        return tflops
    if precision is None:  # the profile's first listed precision
        if not profile.peak_tflops:
            raise UserError(f"profile {profile.name} gives no peak TFLOP/s: give --tflops")
        precision = next(iter(profile.peak_tflops))
    return profile.peak(precision)


def plan_fit(
    profile: Profile,
    workload: Workload,
    *,
    samples_per_s: float | None = None,
    precision: str | None = None,
    tflops: float | None = None,
    mfu: float = 0.4,
    bucket_mb: float = 25.0,
    grad_dtype: str | None = None,
    library: Library | None = None,
    overheads: Overheads | None = None,
    nccl_channels: int | None = None,
) -> Fit:
    """The workload on the profile's hardware: nothing measured here, so nothing validated.

    ``grad_dtype``: the gradients' dtype on the wire (default: fp32, DDP's under autocast);
    ``nccl_channels``: NCCL's channels on a node (default: the profile's).
    """
    for label, value in (
        ("--params", workload.params),
        ("--flops-per-sample", workload.flops_per_sample),
        ("--samples-per-s", samples_per_s),
        ("--tflops", tflops),
        ("--bucket-mb", bucket_mb),
    ):
        if value is not None and value <= 0:
            raise UserError(f"{label} must be > 0, got {value:g}")
    if not 0 < mfu <= 1:
        raise UserError(f"--mfu must be in (0, 1], got {mfu:g}")
    compute = (
        from_throughput(samples_per_s)
        if samples_per_s is not None
        else from_flops(_flops(workload), _peak(profile, precision, tflops), mfu)
    )
    per_param = (
        GRAD_DTYPE_BYTES[grad_dtype] if grad_dtype else BYTES_PER_PARAM.get(precision or "fp32", 4)
    )
    overheads = overheads or Overheads()
    measured = ["compute"] if samples_per_s is not None else []
    measured += ["straggler jitter"] if overheads.step_samples else []
    measured += ["node efficiency"] if overheads.node_efficiency is not None else []
    library = library or Library(nccl_ll128=profile.nccl_ll128)
    model = ScalingModel(
        topology=profile.topology,
        compute=compute,
        grad_bytes=workload.params * per_param,
        bucket_bytes=bucket_mb * MIB,
        library=library,
        tensor_bytes=tuple(float(n * per_param) for n in workload.tensors),
        overheads=overheads,
        measured=tuple(measured),
        grad_element_bytes=per_param,
        comm_sm_share=profile.comm_sm_share(nccl_channels) if library.backend == "nccl" else 0.0,
    )
    return Fit(profile.name, workload.name, model, pd.DataFrame())
