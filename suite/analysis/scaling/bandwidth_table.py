"""The bus bandwidth the model gives each of a step's message sizes (its buckets), on one node and
across nodes, and where each comes from: measured (comm-bench, read off at that size),
datasheet (a hardware profile's links), fitted (comm-bench's sizes through one latency and one
bandwidth) or assumed."""

from __future__ import annotations

import math
from collections import Counter

from dpsuite.analysis.scaling.measured_bandwidth import size_text
from dpsuite.analysis.scaling.model import ScalingModel


def _link_source(model: ScalingModel, across: bool) -> str:
    """Where the links' model of a scope comes from, when comm-bench's curve does not cover it."""
    measured = set(model.measured)
    if across:
        return "fitted: comm-bench across nodes" if "network" in measured else "datasheet"
    return "fitted: comm-bench on one node" if "links" in measured else "datasheet"


def cell(model: ScalingModel, size: float, n: int, across: bool) -> tuple[float, str]:
    """(bus bandwidth in bytes/s, its source) of an all-reduce of ``size`` bytes on ``n``
    ranks."""
    reading = model.reading(size, n)
    if reading is not None:
        return reading.busbw_Bps, reading.source
    seconds = model.allreduce_s(size, n)
    busbw = 2 * (n - 1) / n * size / seconds if seconds > 0 else math.inf
    return busbw, _link_source(model, across)


def scope_counts(model: ScalingModel, n_max: int) -> tuple[int | None, int | None]:
    """The rank counts of the table's columns: one node (as full as ``n_max`` fills it; a
    machine of no known node size: the ranks comm-bench measured on it, else 2) and across
    nodes (``n_max``, at least two full nodes); None where there is no such count."""
    top, n_max = model.topology, max(n_max, 2)
    if top.gpus_per_node is None or top.inter is None:
        curves = model.bandwidth.one_node if model.bandwidth else ()
        return (curves[-1].world_size if curves else 2), None
    one = min(top.gpus_per_node, n_max) if top.gpus_per_node > 1 else None
    return one, max(n_max, 2 * top.gpus_per_node)


def format_bandwidth_table(model: ScalingModel, n_max: int) -> list[str]:
    """The table's lines: one per distinct bucket size of a step (how many buckets of it)."""
    one, across = scope_counts(model, n_max)
    sizes = Counter(float(f"{size:.4g}") for size, _ in model.buckets())
    head = f"on one node ({one} ranks)" if one else "on one node (one rank a node)"
    far = (
        f"across nodes ({across} ranks)"
        if across
        else "across nodes: assumed none (no profile, no comm-bench across nodes)"
    )
    lines = [f"   bus bandwidth per message size (GB/s), {head}; {far}:"]
    for size in sorted(sizes):
        first = _text(*cell(model, size, one, False)) if one else "-"
        second = _text(*cell(model, size, across, True)) if across else "-"
        count = f"x{sizes[size]}"
        lines.append(f"     {size_text(size):>10} {count:>5}  {first:<48} {second}")
    return lines


def _text(busbw: float, source: str) -> str:
    value = "unbounded" if math.isinf(busbw) else f"{busbw / 1e9:.3g}"
    return f"{value} ({source})"
