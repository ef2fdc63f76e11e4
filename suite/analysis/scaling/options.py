"""`dpsuite predict`'s options about the scaling model: worker counts, the baseline, the
gradients' dtype, the communication library, measured overheads and a measured input rate; each
bad value is one UserError."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dpsuite.analysis.scaling import fit
from dpsuite.analysis.scaling.allreduce_cost import (
    ALGORITHM_NAMES,
    BACKENDS,
    LIBRARIES,
    Library,
    parse_version,
)
from dpsuite.analysis.scaling.fit import Fit
from dpsuite.analysis.scaling.model import DEFAULT_WORKERS, GRAD_DTYPE_BYTES, Overheads
from dpsuite.analysis.scaling.profiles import Profile
from dpsuite.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the model's terms")
    group.add_argument(
        "--workers", help="worker counts to predict at, e.g. 8,16,96 (default: powers of two)"
    )
    group.add_argument(
        "--baseline-workers",
        type=int,
        default=1,
        help="efficiency relative to this many workers (papers often report from one node)",
    )
    group.add_argument(
        "--grad-dtype",
        choices=sorted(GRAD_DTYPE_BYTES),
        help="gradient dtype on the wire (default fp32; bf16/fp16 with a compression hook)",
    )
    group.add_argument("--backend", choices=BACKENDS, help="nccl (default on a profile) or gloo")
    group.add_argument("--nccl-version", help="NCCL's version: trees from 2.4 (default 2.8.4)")
    group.add_argument(
        "--library",
        choices=LIBRARIES,
        help="torch-ddp (default), horovod (adds hierarchical), caffe2 (gloo halving-doubling)",
    )
    group.add_argument(
        "--algorithms",
        help=f"restrict the all-reduce to these, e.g. ring ({', '.join(ALGORITHM_NAMES)})",
    )
    group.add_argument(
        "--nccl-channels",
        type=int,
        help="NCCL's channels on a node of --profile (one SM each while an all-reduce runs; "
        "default: the profile's nccl_channels); planning on a profile only",
    )
    group.add_argument(
        "--measured-node-efficiency",
        type=float,
        help="a measured efficiency of one full node (0-1]: its loss beyond the model's terms is "
        "carried to larger worker counts as a per-step overhead",
    )
    group.add_argument(
        "--node-workers", type=int, help="workers of that measurement (default: GPUs per node)"
    )
    group.add_argument(
        "--node-efficiency-from",
        metavar="RESULTS_DIR",
        help="take that efficiency from the runs of one node in a results tree (the most "
        "workers on one host, same per-worker batch, not oversubscribed)",
    )
    group.add_argument(
        "--input-samples-per-s",
        type=float,
        help="a measured rate at which one node's host loads samples (decode, augment; e.g. "
        "your data loader benchmarked alone): a node's throughput is at most this",
    )


def worker_counts(text: str | None, max_workers: int) -> list[int]:
    """``--workers 8,16,96``, or the powers of two up to ``max_workers`` and it."""
    if text is None:
        return sorted({w for w in DEFAULT_WORKERS if w <= max_workers} | {max_workers})
    try:
        counts = sorted({int(w) for w in text.split(",") if w.strip()})
    except ValueError:
        raise UserError(f"--workers: comma-separated whole numbers, got {text!r}") from None
    if not counts or counts[0] < 1:
        raise UserError(f"--workers: worker counts must be >= 1, got {text!r}")
    return counts


def library(a: argparse.Namespace, base: Library) -> Library:
    """``base`` (the runs' or the profile's) with the options given applied."""
    changes = {
        k: v
        for k, v in (
            ("backend", a.backend),
            ("nccl_version", a.nccl_version),
            ("library", a.library),
        )
        if v is not None
    }
    if a.algorithms:
        changes["only"] = _names(a)
    lib = replace(base, **changes)
    _version(lib.nccl_version)
    try:
        lib.algorithms()
    except ValueError as exc:
        raise UserError(f"--algorithms: {exc}") from None
    return lib


def node_runs(a: argparse.Namespace) -> pd.DataFrame | None:
    """The results tree of ``--node-efficiency-from``, read once (None if not given)."""
    if a.node_efficiency_from is None:
        return None
    if not Path(a.node_efficiency_from).is_dir():
        raise UserError(f"results directory not found: {a.node_efficiency_from}")
    from dpsuite import results

    return results.load(a.node_efficiency_from)


def measured_node(
    a: argparse.Namespace, runs: pd.DataFrame, workload: str | None
) -> argparse.Namespace:
    """``a`` with the node efficiency measured by ``workload``'s runs in ``runs``."""
    if workload is None:
        raise UserError("--node-efficiency-from reads the runs of a workload: give --workload")
    found = fit.node_efficiency(runs, workload, a.batch) if not runs.empty else None
    if found is None:
        raise UserError(
            f"--node-efficiency-from {a.node_efficiency_from}: no runs of {workload} at 1 and "
            "at more workers on one host with the same per-worker batch"
        )
    return argparse.Namespace(
        **{**vars(a), "measured_node_efficiency": found[0], "node_workers": found[1]}
    )


def overheads(a: argparse.Namespace, gpus_per_node: int | None) -> Overheads:
    """The measured node efficiency, if given."""
    eff = a.measured_node_efficiency
    if eff is None:
        if a.node_workers is not None:
            raise UserError("--node-workers goes with --measured-node-efficiency")
        return Overheads()
    if not 0 < eff <= 1:
        raise UserError(f"--measured-node-efficiency must be in (0, 1], got {eff:g}")
    workers = a.node_workers or gpus_per_node
    if workers is None or workers < 2:
        raise UserError("--measured-node-efficiency: give --node-workers (>= 2)")
    return Overheads(node_efficiency=eff, node_workers=workers)


def nccl_channels(a: argparse.Namespace, profile: Profile) -> int | None:
    """``--nccl-channels`` against the profile's SMs (None: the profile's own count)."""
    if a.nccl_channels is None:
        return None
    if profile.sm_count is None:
        raise UserError(f"--nccl-channels: profile {profile.name} gives no sm_count")
    if not 1 <= a.nccl_channels < profile.sm_count:
        raise UserError(
            f"--nccl-channels must be from 1 to fewer than the {profile.sm_count} SMs of "
            f"{profile.name}, got {a.nccl_channels}"
        )
    return a.nccl_channels


def check(a: argparse.Namespace) -> None:
    """What can be checked before anything is read: each option on its own."""
    if a.baseline_workers < 1:
        raise UserError(f"--baseline-workers must be >= 1, got {a.baseline_workers}")
    if a.nccl_channels is not None and (a.profile is None or a.published):
        raise UserError("--nccl-channels goes with --profile (planning a workload on it)")
    if a.nccl_version is not None:
        _version(a.nccl_version)
    _names(a)
    if a.measured_node_efficiency is not None and a.node_efficiency_from is not None:
        raise UserError("give --measured-node-efficiency or --node-efficiency-from, not both")
    if a.node_efficiency_from is None:
        overheads(a, gpus_per_node=2)  # the value's range; its node is known later
    rate = a.input_samples_per_s
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise UserError(f"--input-samples-per-s must be a finite number > 0, got {rate:g}")
    if rate is not None and a.published:
        raise UserError(
            "--input-samples-per-s goes with a prediction, not --published (no publication "
            "gives its host's input rate)"
        )


def input_rate(one: Fit, a: argparse.Namespace) -> Fit:
    """The fit with ``--input-samples-per-s``, a measured term, if given."""
    if a.input_samples_per_s is None:
        return one
    m = one.model
    model = replace(
        m, input_samples_per_s=a.input_samples_per_s, measured=(*m.measured, "input rate")
    )
    return replace(one, model=model)


def profile_library(a: argparse.Namespace, nccl_ll128: bool) -> Library:
    """The library for planning on a profile: NCCL unless told otherwise."""
    return library(a, Library(nccl_ll128=nccl_ll128))


def _version(text: str) -> None:
    try:
        parse_version(text)
    except ValueError as exc:
        raise UserError(f"--nccl-version: {exc}") from None


def _names(a: argparse.Namespace) -> tuple[str, ...]:
    """The algorithms of ``--algorithms``, each a known one."""
    names = tuple(x.strip() for x in (a.algorithms or "").split(",") if x.strip())
    unknown = [x for x in names if x not in ALGORITHM_NAMES]
    if unknown:
        raise UserError(
            f"--algorithms: unknown algorithm {unknown[0]} (known: {', '.join(ALGORITHM_NAMES)})"
        )
    return names


def apply(one: Fit, a: argparse.Namespace, runs: pd.DataFrame | None = None) -> Fit:
    """A fitted model with the options applied (its measured terms kept); ``runs``: those of
    ``--node-efficiency-from``."""
    if runs is not None:
        a = measured_node(a, runs, one.workload)
    m = one.model
    model = replace(m, library=library(a, m.library))
    if a.grad_dtype is not None:  # the fit's bytes per parameter -> the dtype's
        scale = GRAD_DTYPE_BYTES[a.grad_dtype] / m.grad_element_bytes
        model = replace(
            model,
            grad_element_bytes=GRAD_DTYPE_BYTES[a.grad_dtype],
            grad_bytes=m.grad_bytes * scale,
            tensor_bytes=tuple(b * scale for b in m.tensor_bytes),
        )
    extra = overheads(a, m.topology.gpus_per_node)
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
