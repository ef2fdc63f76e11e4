"""All-reduce time of S bytes over N ranks on a two-level topology: ring, tree, hierarchical.

Notation: m nodes of g ranks (N = m*g), alpha_i / beta_i the latency per hop and time per byte of
the intra-node link (per GPU), alpha_n / beta_n those of the inter-node network (per node, all its
NICs together). A ring or tree that spans nodes is as fast as its slowest link:
beta = max(beta_i, beta_n).

* **ring** (Patarasuk & Yuan 2009; NCCL's ring): a reduce-scatter and an all-gather of N-1 steps
  each. Every rank sends 2(N-1)/N * S; of the 2(N-1) steps, 2(m-1) cross a node boundary
  (NCCL's own cost model counts them so: ``src/graph/tuning.cc``, nInterSteps):
  ``t = 2(N-m) alpha_i + 2(m-1) alpha_n + 2(N-1)/N * S * beta``.
  Bandwidth-optimal, but the latency grows linearly with N.
* **tree** (NCCL >= 2.4: a double binary tree across nodes, a chain inside each; Sanders, Speck &
  Traeff 2009): a pipelined reduce up the tree and broadcast down; depth log2(m) across nodes:
  ``t = 2((g-1) alpha_i + ceil(log2 m) alpha_n) + 2 S * beta`` (NCCL's model: the same latency
  sum and half the ring's algorithm bandwidth).
* **hierarchical** (Goyal et al. 2017, section 4; Horovod's hierarchical all-reduce): a ring
  reduce-scatter inside each node, an all-reduce of the 1/g shard across nodes by recursive
  halving and doubling (Thakur, Rabenseifner & Gropp 2005: 2 log2(m) steps, 2(m-1)/m of the data),
  the g shards in parallel through the node's NICs, then a ring all-gather inside the node:
  ``t = 2(g-1) alpha_i + 2(g-1)/g * S * beta_i + 2 ceil(log2 m) alpha_n + 2(m-1)/m * S * beta_n``.

The model takes the fastest of the three for every message, as NCCL's tuner picks an algorithm
per size. On one node (m = 1) all three are the intra-node ring or chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from suite.analysis.scaling.topology import Topology

Algorithm = Callable[[Topology, float, int], float]


def _log2_ceil(m: int) -> int:
    return math.ceil(math.log2(m)) if m > 1 else 0


def _beta(top: Topology, m: int) -> float:
    """Time per byte of a ring or tree that spans ``m`` nodes: its slowest link."""
    beta = top.intra.s_per_byte
    return max(beta, top.inter.s_per_byte) if m > 1 and top.inter else beta


def _alpha_n(top: Topology) -> float:
    return top.inter.latency_s if top.inter else top.intra.latency_s


def ring_s(top: Topology, size: float, n: int) -> float:
    m = top.nodes(n)
    latency = 2 * (n - m) * top.intra.latency_s + 2 * (m - 1) * _alpha_n(top)
    return latency + 2 * (n - 1) / n * size * _beta(top, m)


def tree_s(top: Topology, size: float, n: int) -> float:
    m, g = top.nodes(n), top.ranks_per_node(n)
    latency = 2 * ((g - 1) * top.intra.latency_s + _log2_ceil(m) * _alpha_n(top))
    return latency + 2 * size * _beta(top, m)


def hierarchical_s(top: Topology, size: float, n: int) -> float:
    m, g = top.nodes(n), top.ranks_per_node(n)
    if m == 1:
        return ring_s(top, size, n)
    inside = 2 * (g - 1) * top.intra.latency_s + 2 * (g - 1) / g * size * top.intra.s_per_byte
    across = 2 * _log2_ceil(m) * _alpha_n(top) + 2 * (m - 1) / m * size * top.inter.s_per_byte
    return inside + across


ALGORITHMS: dict[str, Algorithm] = {
    "ring": ring_s,
    "tree": tree_s,
    "hierarchical": hierarchical_s,
}


def allreduce(top: Topology, size: float, n: int) -> tuple[float, str]:
    """Seconds for the fastest algorithm on ``size`` bytes over ``n`` ranks, and its name."""
    if n <= 1:
        return 0.0, "none"
    times = {name: algo(top, size, n) for name, algo in ALGORITHMS.items()}
    best = min(times, key=times.__getitem__)
    return times[best], best
