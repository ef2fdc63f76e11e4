"""The scaling model against published multi-GPU scaling (``published.yaml``).

Each entry gives what a user would give the model (a hardware profile, the model's parameters
or its gradient tensors, per-GPU batch, bucket size, gradient dtype, the library and NCCL
version of the time, single-GPU throughput) and the efficiency the publication reports; the
model predicts the efficiency from the first, and the second is only put beside it.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.compute import from_throughput
from dpsuite.analysis.scaling.model import GRAD_DTYPE_BYTES, MIB, Overheads, ScalingModel
from dpsuite.analysis.scaling.profiles import Profile, load_profile
from dpsuite.analysis.scaling.published_file import load_published
from dpsuite.analysis.scaling.skill import trivial_forecasts
from dpsuite.analysis.scaling.tensor_file import load_tensors

PUBLISHED = Path(__file__).with_name("published.yaml")
TENSORS = Path(__file__).with_name("published_tensors.yaml")


@functools.cache
def _tensors(name: str | None) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(elements, backward MFLOPs) of each gradient tensor of a published model."""
    if name is None:
        return (), ()
    shipped = yaml.safe_load(TENSORS.read_text())
    if name not in shipped:  # a tensor-list file (a user's table)
        tensors = load_tensors(name)
        return tensors.numels, tensors.backward_mflops
    model = shipped[name]
    return tuple(int(n) for n in model["numels"]), tuple(model["backward_mflops"])


def published_entries(path: Path = PUBLISHED) -> list[dict[str, Any]]:
    """The entries of a table of measured scaling, each checked (``published_file``)."""
    return load_published(path)


def published_model(entry: dict) -> ScalingModel:
    """The model of one published result, from its stated inputs only."""
    profile = load_profile(entry["profile"])
    per_param = GRAD_DTYPE_BYTES[entry.get("grad_dtype", "fp32")]
    tensors, work = _tensors(entry.get("tensors"))
    params = sum(tensors) if tensors else float(entry["params"])
    library = Library(
        backend=entry.get("backend", "nccl"),
        nccl_version=str(entry.get("nccl_version", "2.8.4")),
        library=entry.get("library", "torch-ddp"),
        only=tuple(entry.get("algorithms") or ()),
        nccl_ll128=profile.nccl_ll128,
    )
    overheads = _measured_overheads(entry)
    return ScalingModel(
        topology=profile.topology,
        compute=from_throughput(float(entry["single_gpu_samples_per_s"])),
        grad_bytes=params * per_param,
        bucket_bytes=float(entry["bucket_mb"]) * MIB,
        library=library,
        tensor_bytes=tuple(float(n * per_param) for n in tensors),
        tensor_work=work,
        measured=("compute", "node efficiency") if overheads.node_efficiency else ("compute",),
        grad_element_bytes=per_param,
        comm_sm_share=_sm_share(entry, profile) if library.backend == "nccl" else 0.0,
        overheads=overheads,
        grad_accum=int(entry.get("grad_accum", 1)),
        overlap=bool(entry.get("overlap", True)),
    )


def _measured_overheads(entry: dict) -> Overheads:
    """The publication's own efficiency at fewer GPUs of one node, where it gives one: what it
    loses beyond the model's terms is carried to the predicted count (never the predicted
    point itself)."""
    measured = entry.get("measured_efficiency")
    if measured is None:
        return Overheads()
    workers = int(measured["workers"])
    if not 1 < workers < int(entry["workers"]):
        raise ValueError(f"{entry['label']}: measured_efficiency must be at fewer GPUs")
    return Overheads(node_efficiency=float(measured["efficiency"]), node_workers=workers)


def _given(entry: dict) -> dict[int, float]:
    """The efficiencies below the row's count that its prediction is given (count → value)."""
    measured = entry.get("measured_efficiency")
    return {int(measured["workers"]): float(measured["efficiency"])} if measured else {}


def _channels(entry: dict, profile: Profile) -> int | None:
    """NCCL's channels: the entry's (for the NCCL of its time), else the profile's."""
    channels = entry.get("nccl_channels")
    return int(channels) if channels is not None else profile.nccl_channels


def _sm_share(entry: dict, profile: Profile) -> float:
    """NCCL's channels / the GPU's SMs."""
    return profile.comm_sm_share(_channels(entry, profile))


def predicted_efficiency(entry: dict, sm_share: bool = True, measured: bool = True) -> float:
    """Throughput per GPU at ``workers`` over that at ``baseline_workers``, predicted
    (``sm_share=False``: without NCCL's share of the SMs; ``measured=False``: without the
    publication's measurement at fewer GPUs, the bound)."""
    return _efficiency(_variant(published_model(entry), sm_share, measured), entry)


def _variant(model: ScalingModel, sm_share: bool = True, measured: bool = True) -> ScalingModel:
    """The model with NCCL's share of the SMs or the measured overhead taken out."""
    if not sm_share:
        model = replace(model, comm_sm_share=0.0)
    if not measured:
        model = replace(model, overheads=Overheads(), measured=("compute",))
    return model


def _efficiency(model: ScalingModel, entry: dict) -> float:
    return model.efficiency(
        int(entry["workers"]), int(entry["batch"]), int(entry["baseline_workers"])
    )


def _terms(model: ScalingModel, entry: dict) -> dict[str, Any]:
    """The model's terms of one row, part by part (``terms``: all of them as one line)."""
    algorithm = model.step(int(entry["workers"]), int(entry["batch"])).algorithm
    packing = "DDP buckets" if model.library.library == "torch-ddp" else "fused"
    if model.tensor_bytes and model.bucket_bytes == 0:
        packing = "per tensor"
    grads = f"{len(model.tensor_bytes)} tensors, {packing}" if model.tensor_bytes else "even"
    extras = ((f"NCCL's SMs {_share(entry)}",) if model.comm_sm_share else ()) + _network(
        model, entry
    )
    parts = [f"{model.library.describe()}: {algorithm}", grads, *extras, model.kind()]
    return {
        "terms": "; ".join(parts),
        "library": model.library.describe(),
        "algorithm": algorithm,
        "packing": packing if model.tensor_bytes else "even",
        "extra_terms": extras,
        "kind": model.kind(),
    }


def _network(model: ScalingModel, entry: dict) -> tuple[str, ...]:
    """The network's transport and the share of its line rate that is payload, where the
    result spans nodes."""
    inter = model.topology.inter
    if model.topology.nodes(int(entry["workers"])) < 2 or inter is None or inter.framing is None:
        return ()
    return (f"{inter.framing.transport} {100 * inter.framing.fraction:.1f} % payload",)


def _share(entry: dict) -> str:
    """NCCL's channels / the GPU's SMs of an entry, as a fraction."""
    profile = load_profile(entry["profile"])
    return f"{_channels(entry, profile)}/{profile.sm_count}"


def _data(entry: dict) -> str:
    """The data loader the publication's benchmark ran with, and the source's commit."""
    backend = entry.get("data_backend")
    if backend is None:
        return "not stated"
    commit = entry.get("source_commit")
    return f"{backend} @ {commit}" if commit else backend


def published_table(path: Path = PUBLISHED) -> pd.DataFrame:
    """One row per published result: label, hardware, published and predicted efficiency, and
    the data loader it ran with where the source states it."""
    rows = []
    for entry in published_entries(path):
        model = published_model(entry)  # built once: its variants below are copies
        predicted = _efficiency(model, entry)
        rows.append(
            {
                "label": entry["label"],
                "family": entry["family"],
                "publication": entry["publication"],
                "profile": entry["profile"],
                "workers": int(entry["workers"]),
                "baseline_workers": int(entry["baseline_workers"]),
                "published_efficiency": float(entry["published_efficiency"]),
                "bound": _efficiency(_variant(model, measured=False), entry),
                "without_sm_share": _efficiency(_variant(model, sm_share=False), entry),
                "predicted_efficiency": predicted,
                "difference_points": 100 * (predicted - float(entry["published_efficiency"])),
                **trivial_forecasts(_given(entry)),
                **_terms(model, entry),
                "data": _data(entry),
            }
        )
    return pd.DataFrame(rows)
