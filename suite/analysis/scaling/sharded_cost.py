"""The collectives of the sharded strategies, with the all-reduce's link costs: all-gather,
reduce-scatter and broadcast of S bytes over N ranks.

A ring all-reduce is a reduce-scatter followed by an all-gather (Patarasuk & Yuan 2009; NCCL's
``nsteps`` for all-gather and reduce-scatter are N-1, the all-reduce's 2(N-1)), so each takes
half its hops and moves (N-1)/N of the buffer per rank:

* alpha-beta (gloo, and a fitted machine): all-gather ``(N-m) alpha + (m-1) alpha_n +
  (N-1)/N S beta`` (gloo's ring allgather);
* gloo's reduce-scatter is not a ring reduce-scatter: PyTorch's ProcessGroupGloo
  (``reduce_scatter_tensor_coalesced``, which ``reduce_scatter_tensor`` and FSDP call)
  all-reduces the whole buffer and keeps its own chunk, so it costs gloo's ring all-reduce of S
  (twice the hops and bytes of the all-gather; the suite's traffic counter still counts the
  (N-1)/N of a ring reduce-scatter);
* NCCL: all-gather and reduce-scatter each half the ring all-reduce NCCL's tuning model gives
  for S (its base latency halved too: a small part of the per-call latency is dropped);
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
    latency = (n - m) * top.intra.latency_s + (m - 1) * allreduce_cost.span_latency_s(top)
    # a ring across nodes moves at its slowest link
    return latency + (n - 1) / n * size * allreduce_cost.span_s_per_byte(top, m)


def reduce_scatter_s(top: Topology, size: float, n: int, library: Library) -> float:
    """Seconds to reduce-scatter a buffer of ``size`` bytes (each rank keeps ``size / n``)."""
    if n <= 1:
        return 0.0
    if library.backend == "gloo":
        return allreduce_cost.ring_s(top, size, n)  # ProcessGroupGloo: an all-reduce
    return all_gather_s(top, size, n, library)  # NCCL: half its ring all-reduce


def broadcast_s(top: Topology, size: float, n: int, library: Library) -> float:
    """Seconds to broadcast ``size`` bytes from one rank to the others."""
    if n <= 1:
        return 0.0
    return all_gather_s(top, size * n / (n - 1), n, library)
