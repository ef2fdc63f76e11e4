"""The scaling model's terms as the user chose them (`dpsuite predict`'s options): worker
counts, the gradients' dtype, the communication library, measured overheads and a measured
input rate, applied to a fitted or planned model; a value that does not fit the model or the
hardware is one UserError."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from dpsuite.analysis.scaling import fit
from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.fit import Fit
from dpsuite.analysis.scaling.model import DEFAULT_WORKERS, GRAD_DTYPE_BYTES, Overheads
from dpsuite.analysis.scaling.profiles import Profile
from dpsuite.analysis.scaling.tensor_file import TensorList
from dpsuite.errors import UserError


@dataclass(frozen=True)
class ModelOptions:
    """What the user chose of the model's terms; None (or empty): the fit's or the profile's.

    ``node_efficiency_from``: a results tree whose runs of one node give
    ``measured_node_efficiency`` at ``node_workers`` (see `measured_node`).
    """

    grad_dtype: str | None = None
    backend: str | None = None
    nccl_version: str | None = None
    library: str | None = None
    algorithms: tuple[str, ...] = ()
    nccl_channels: int | None = None
    measured_node_efficiency: float | None = None
    node_workers: int | None = None
    node_efficiency_from: str | None = None
    input_samples_per_s: float | None = None
    tensors: TensorList | None = None
    grad_accum: int = 1
    overlap: bool = True


def default_worker_counts(max_workers: int) -> list[int]:
    """The worker counts predicted at unless told: the powers of two up to ``max_workers``, and
    it."""
    return sorted({w for w in DEFAULT_WORKERS if w <= max_workers} | {max_workers})


def library(opts: ModelOptions, base: Library) -> Library:
    """``base`` (the runs' or the profile's) with the options given applied."""
    changes = {
        k: v
        for k, v in (
            ("backend", opts.backend),
            ("nccl_version", opts.nccl_version),
            ("library", opts.library),
        )
        if v is not None
    }
    if opts.algorithms:
        changes["only"] = opts.algorithms
    lib = replace(base, **changes)
    try:
        lib.algorithms()
    except ValueError as exc:
        raise UserError(f"--algorithms: {exc}") from None
    return lib


def node_runs(opts: ModelOptions) -> pd.DataFrame | None:
    """The results tree of ``node_efficiency_from``, read once (None if not given)."""
    if opts.node_efficiency_from is None:
        return None
    if not Path(opts.node_efficiency_from).is_dir():
        raise UserError(f"results directory not found: {opts.node_efficiency_from}")
    from dpsuite import results

    return results.load(opts.node_efficiency_from)


def measured_node(
    opts: ModelOptions, runs: pd.DataFrame, workload: str | None, batch: int
) -> ModelOptions:
    """``opts`` with the node efficiency measured by ``workload``'s runs in ``runs`` (those of
    ``node_efficiency_from``) at the per-worker ``batch``."""
    if workload is None:
        raise UserError("--node-efficiency-from reads the runs of a workload: give --workload")
    found = fit.node_efficiency(runs, workload, batch) if not runs.empty else None
    if found is None:
        raise UserError(
            f"--node-efficiency-from {opts.node_efficiency_from}: no runs of {workload} at 1 "
            "and at more workers on one host with the same per-worker batch"
        )
    return replace(opts, measured_node_efficiency=found[0], node_workers=found[1])


def overheads(opts: ModelOptions, gpus_per_node: int | None) -> Overheads:
    """The measured node efficiency, if given."""
    eff = opts.measured_node_efficiency
    if eff is None:
        if opts.node_workers is not None:
            raise UserError("--node-workers goes with --measured-node-efficiency")
        return Overheads()
    if not 0 < eff <= 1:
        raise UserError(f"--measured-node-efficiency must be in (0, 1], got {eff:g}")
    workers = opts.node_workers or gpus_per_node
    if workers is None or workers < 2:
        raise UserError("--measured-node-efficiency: give --node-workers (>= 2)")
    return Overheads(node_efficiency=eff, node_workers=workers)


def nccl_channels(opts: ModelOptions, profile: Profile) -> int | None:
    """``nccl_channels`` against the profile's SMs (None: the profile's own count)."""
    if opts.nccl_channels is None:
        return None
    if profile.sm_count is None:
        raise UserError(f"--nccl-channels: profile {profile.name} gives no sm_count")
    if not 1 <= opts.nccl_channels < profile.sm_count:
        raise UserError(
            f"--nccl-channels must be from 1 to fewer than the {profile.sm_count} SMs of "
            f"{profile.name}, got {opts.nccl_channels}"
        )
    return opts.nccl_channels


def input_rate(one: Fit, opts: ModelOptions) -> Fit:
    """The fit with ``input_samples_per_s``, a measured term, if given."""
    if opts.input_samples_per_s is None:
        return one
    m = one.model
    model = replace(
        m, input_samples_per_s=opts.input_samples_per_s, measured=(*m.measured, "input rate")
    )
    return replace(one, model=model)


def step_shape(one: Fit, opts: ModelOptions) -> Fit:
    """The fit with the step as the user runs it: the tensor list given (its bytes at the fit's
    bytes per element), gradient accumulation, overlap off."""
    m = one.model
    model = replace(m, grad_accum=opts.grad_accum, overlap=opts.overlap)
    if opts.tensors is not None:
        per_element = m.grad_element_bytes
        model = replace(
            model,
            grad_bytes=sum(opts.tensors.numels) * per_element,
            tensor_bytes=tuple(n * per_element for n in opts.tensors.numels),
            tensor_work=opts.tensors.backward_mflops,
        )
    return replace(one, model=model)


def profile_library(opts: ModelOptions, nccl_ll128: bool) -> Library:
    """The library for planning on a profile: NCCL unless told otherwise."""
    return library(opts, Library(nccl_ll128=nccl_ll128))


def apply(one: Fit, opts: ModelOptions) -> Fit:
    """A fitted model with the options applied (its measured terms kept)."""
    m = one.model
    model = replace(m, library=library(opts, m.library))
    if opts.grad_dtype is not None:  # the fit's bytes per parameter -> the dtype's
        scale = GRAD_DTYPE_BYTES[opts.grad_dtype] / m.grad_element_bytes
        model = replace(
            model,
            grad_element_bytes=GRAD_DTYPE_BYTES[opts.grad_dtype],
            grad_bytes=m.grad_bytes * scale,
            tensor_bytes=tuple(b * scale for b in m.tensor_bytes),
        )
    extra = overheads(opts, m.topology.gpus_per_node)
    if extra.node_efficiency is not None:
        model = replace(
            model,
            overheads=replace(
                m.overheads,
                node_efficiency=extra.node_efficiency,
                node_workers=extra.node_workers,
            ),
            measured=(*m.measured, "node efficiency"),
        )
    return replace(one, model=model)
