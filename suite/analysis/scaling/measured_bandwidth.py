"""The network as comm-bench measured it: achieved all-reduce bus bandwidth per message size.

A fitted link (one latency, one bandwidth) is a straight line through what comm-bench measured;
real links are not straight lines (protocol switches, eager/rendezvous limits, caches), so where
the user has comm-bench results the model reads each bucket's all-reduce off the measurements
themselves: the bus bandwidth (nccl-tests' busbw, comparable across rank counts) at that size,
interpolated linearly in log(size) between the two measured sizes around it, on one node and
across nodes where each was measured. The all-reduce of S bytes on n ranks then takes

    t = 2(n-1)/n * S / busbw(S)  (+ the latency hops n ranks add beyond the w ranks measured)

Beyond the measured sizes nothing was measured, and the curve says so: above the largest, its
bandwidth is held (a link is bandwidth-bound there); below the smallest, its time is held (a
link is latency-bound there, and a smaller message is no faster).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

ONE_NODE = "one node"
ACROSS_NODES = "across nodes"


@dataclass(frozen=True)
class Reading:
    """The bus bandwidth at one size and how it was had."""

    busbw_Bps: float
    source: str  # "measured", "measured, interpolated", "extrapolated above 16 MiB: ..." ...

    @property
    def extrapolated(self) -> bool:
        return self.source.startswith("extrapolated")


@dataclass(frozen=True)
class BandwidthCurve:
    """Bus bandwidth per message size of one comm-bench: ``world_size`` ranks over ``nodes``."""

    sizes: tuple[float, ...]  # bytes, ascending, each once
    busbw_Bps: tuple[float, ...]  # the median over repeats at each size
    world_size: int
    nodes: int

    def at(self, size: float) -> Reading:
        """The bus bandwidth at ``size`` bytes: measured, interpolated or extrapolated."""
        lo, hi = self.sizes[0], self.sizes[-1]
        if size > hi:
            return Reading(self.busbw_Bps[-1], f"extrapolated above {size_text(hi)}: its rate held")
        if size < lo:  # the smallest message's time held: bandwidth falls with the size
            held = f"extrapolated below {size_text(lo)}: its time held"
            return Reading(self.busbw_Bps[0] * size / lo, held)
        if size in self.sizes:
            return Reading(self.busbw_Bps[self.sizes.index(size)], "measured")
        logs = np.log(np.array(self.sizes))
        value = float(np.interp(math.log(size), logs, np.array(self.busbw_Bps)))
        return Reading(value, "measured, interpolated")

    def describe(self) -> str:
        return (
            f"{self.world_size} ranks on {self.nodes} node(s), "
            f"{size_text(self.sizes[0])}..{size_text(self.sizes[-1])}"
        )


@dataclass(frozen=True)
class MeasuredBandwidth:
    """The curves of one machine's comm-bench, one per world size measured: on one node and
    across nodes (empty: not measured), each in ascending world size."""

    one_node: tuple[BandwidthCurve, ...] = ()
    across_nodes: tuple[BandwidthCurve, ...] = ()

    def curve(self, nodes: int, n: int) -> BandwidthCurve | None:
        """The curve for an all-reduce of ``n`` ranks over ``nodes`` nodes: the one of the most
        ranks measured up to ``n`` (else the fewest); None where the scope was not measured."""
        curves = self.one_node if nodes <= 1 else self.across_nodes
        if not curves:
            return None
        upto = [c for c in curves if c.world_size <= n]
        return upto[-1] if upto else curves[0]

    def scopes(self) -> list[str]:
        return [s for s, c in ((ONE_NODE, self.one_node), (ACROSS_NODES, self.across_nodes)) if c]


def size_text(size: float) -> str:
    """Bytes in binary units: 512 B, 64 KiB, 16 MiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def _curve(rows: pd.DataFrame, nodes: int) -> BandwidthCurve | None:
    """The curve of one world size's ``rows``: the median over repeats at each size."""
    busbw = rows.groupby("size_bytes")["busbw_GBps"].median().sort_index()
    busbw = busbw[np.isfinite(busbw) & (busbw > 0)]
    if busbw.empty:
        return None
    sizes = tuple(float(s) for s in busbw.index)
    world = int(rows["world_size"].iloc[0])
    return BandwidthCurve(sizes, tuple(float(b) * 1e9 for b in busbw), world, nodes)


def _curves(rows: pd.DataFrame, nodes: pd.Series) -> tuple[BandwidthCurve, ...]:
    """One curve per world size among ``rows``, in ascending world size."""
    found = []
    for _, mine in rows.groupby("world_size", sort=True):
        curve = _curve(mine, int(nodes[mine.index].max()))
        if curve is not None:
            found.append(curve)
    return tuple(found)


def from_bench(rows: pd.DataFrame) -> MeasuredBandwidth | None:
    """The curves of error-free multi-rank all-reduce rows (``fit.usable_rows``), None when
    there are none: on one node (world size at most the ranks per host) and across nodes."""
    if rows.empty or "busbw_GBps" not in rows:
        return None
    per_host = rows.get("hardware.workers_per_host", pd.Series(np.nan, index=rows.index))
    per_host = per_host.fillna(rows["world_size"]).astype(int)
    nodes = np.ceil(rows["world_size"] / per_host).astype(int)
    one, across = _curves(rows[nodes <= 1], nodes), _curves(rows[nodes > 1], nodes)
    return MeasuredBandwidth(one, across) if one or across else None
