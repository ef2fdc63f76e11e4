"""The collectives of the sharded strategies, with the all-reduce's link costs: all-gather,
reduce-scatter and broadcast of S bytes over N ranks.

A ring all-reduce is a reduce-scatter followed by an all-gather (Patarasuk & Yuan 2009; NCCL's
``nsteps`` for all-gather and reduce-scatter are N-1, the all-reduce's 2(N-1)), so each takes
half its hops and moves (N-1)/N of the buffer per rank:

* alpha-beta (gloo, and a fitted machine): all-gather ``(N-m) alpha + (m-1) alpha_n +
  (N-1)/N S beta``; reduce-scatter the same plus the reduction ``(N-1)/N S gamma``;
* NCCL: half the ring all-reduce NCCL's tuning model gives for S (its base latency halved too:
  a small over-count of the per-call latency is dropped);
* broadcast of S from one rank, pipelined along the ring: ``(N-1)`` hops and S beta, i.e. the
  all-gather of ``S N/(N-1)``.
"""

from __future__ import annotations

from dpsuite.analysis.scaling import allreduce_cost
from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.topology import Topology


def all_gather_s(top: Topology, size: float, n: int, library: Library) -> float:
    """Seconds to all-gather a buffer of ``size`` bytes (each rank holds ``size / n``)."""
    if n <= 1:
        return 0.0
    if library.backend == "nccl":
        return allreduce_cost.nccl_s(top, size, n, "ring", library.nccl_ll128) / 2
    m = top.nodes(n)
    inter = top.inter.latency_s if top.inter else top.intra.latency_s
    latency = (n - m) * top.intra.latency_s + (m - 1) * inter
    beta = top.intra.s_per_byte
    if m > 1 and top.inter:
        beta = max(beta, top.inter.s_per_byte)  # a ring across nodes: its slowest link
    return latency + (n - 1) / n * size * beta


def reduce_scatter_s(top: Topology, size: float, n: int, library: Library) -> float:
    """Seconds to reduce-scatter a buffer of ``size`` bytes (each rank keeps ``size / n``)."""
    if n <= 1:
        return 0.0
    reduction = 0.0 if library.backend == "nccl" else (n - 1) / n * size * top.gamma
    return all_gather_s(top, size, n, library) + reduction


def broadcast_s(top: Topology, size: float, n: int, library: Library) -> float:
    """Seconds to broadcast ``size`` bytes from one rank to the others."""
    if n <= 1:
        return 0.0
    return all_gather_s(top, size * n / (n - 1), n, library)
