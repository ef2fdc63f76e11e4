"""All-reduce time of S bytes over N ranks, as the communication library does it.

Notation: m nodes of g ranks (N = m*g); alpha / beta the latency per hop and time per byte of a
link (intra-node per GPU, inter-node per node: all its NICs); gamma the time per byte of the
reduction itself. A ring or tree that spans nodes is as fast as its slowest link.

**NCCL** (``backend="nccl"``): NCCL's own cost model, ``src/graph/tuning.cc`` of NCCL 2.8.4
(``NCCL_MODEL_VERSION``): for each algorithm and protocol (LL, LL128, Simple) a base latency, a
latency per hop by link kind (NVLink, PCI, network) and a bandwidth factor; the tuner takes the
fastest (algorithm, protocol) per message, and so does this model.

* ring: ``baseLat + (2(N-1) - 2(m-1)) intraLat + 2(m-1) interLat`` (x 1.9 for Simple across
  nodes on large messages: the ring's plateau), algorithm bandwidth ``busBw * N / (2(N-1))``;
* tree (NCCL >= 2.4: a chain inside each node, a double binary tree across nodes):
  ``baseLat + 2((g-1) intraLat + floor(log2 m) interLat)``, algorithm bandwidth
  ``0.92 busBw / 2``, times NCCL's tree correction factor for medium sizes;
* LL: bus bandwidth / 4 (ring) or / 3.8 (tree), at most ``llMaxBw``; LL128: x 0.92 (ring),
  x 7/9 on one node and 0.915 across nodes (tree), only where NCCL enables it (Volta/Ampere on
  NVLink: the profile's ``nccl_ll128``). NCCL's per-channel bandwidth caps are not modelled, nor
  CollNet/NVLS (its channels' SMs are: ``overlap.schedule``).

**gloo** (``backend="gloo"``, and what a fitted machine is modelled with), alpha-beta-gamma:

* ring (PyTorch's ProcessGroupGloo: ``gloo::allreduce``, a ring by default):
  ``2(N-1) alpha + 2(N-1)/N S beta + (N-1)/N S gamma``;
* halving-doubling (gloo's AllreduceHalvingDoubling, Caffe2; Thakur, Rabenseifner & Gropp 2005,
  sec. 4.4): for a power of two ``2 lg N alpha + 2(N-1)/N S beta + (N-1)/N S gamma``; otherwise
  the r = N - p' extra ranks (p' = 2^floor(lg N)) first fold into the others and get the result
  back: ``(2 lg p' + 2) alpha + (2 + 2(p'-1)/p') S beta + (1 + (p'-1)/p') S gamma``.

**hierarchical** (Horovod's hierarchical all-reduce; Goyal et al. 2017, sec. 4.3): a ring
reduce-scatter inside each node, halving-doubling of the 1/g shard across nodes (the g shards in
parallel through the node's NICs), a ring all-gather inside the node. Only a library that does it
(``library="horovod"`` or ``"caffe2"``) offers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dpsuite.analysis.scaling.topology import Link, Topology

NCCL_MODEL_VERSION = "2.8.4"  # the release whose src/graph/tuning.cc the constants below are
PROTOCOLS = ("LL", "LL128", "Simple")
# baseLat[algorithm][protocol], us.
NCCL_BASE_LAT = {"tree": (4.4, 4.4, 0.0), "ring": (3.6, 10.0, 8.4)}
# hwLat[link kind][algorithm][protocol], us per hop.
NCCL_HW_LAT = {
    "nvlink": {"tree": (0.52, 1.25, 28.0), "ring": (0.47, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 9.6)},
}
NCCL_LL_MAX_BW = (39.0, 39.0, 20.4)  # GB/s, llMaxBws (Volta/Intel) for 1, 2, >2 nodes
# treeCorrectionFactor[protocol][floor(log2(S / 64))], powers of two 64 B .. 256 MB.
NCCL_TREE_CORRECTION = (
    (1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1),
    (1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, .92, .92),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)  # fmt: skip
NCCL_TREE_SINCE = (2, 4)  # NCCL 2.4 (Dec 2018) added trees; before it NCCL had rings only
BACKENDS = ("nccl", "gloo")
LIBRARIES = ("torch-ddp", "horovod", "caffe2")
ALGORITHM_NAMES = ("ring", "tree", "halving-doubling", "hierarchical")


def parse_version(text: str) -> tuple[int, int]:
    """ "2.8.4" -> (2, 8); a bad version is a ValueError."""
    parts = str(text).split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a version: {text!r} (e.g. 2.8 or 2.18.5)")
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class Library:
    """How gradients are all-reduced: the backend, NCCL's version, the library around it, and
    the algorithms it may pick from (empty: all it has)."""

    backend: str = "nccl"
    nccl_version: str = NCCL_MODEL_VERSION
    library: str = "torch-ddp"
    only: tuple[str, ...] = ()
    nccl_ll128: bool = False

    def available(self) -> tuple[str, ...]:
        """The algorithms this library and version have."""
        if self.backend == "nccl":
            have = ["ring"] + (
                ["tree"] if parse_version(self.nccl_version) >= NCCL_TREE_SINCE else []
            )
        else:
            have = ["ring"] + (["halving-doubling"] if self.library == "caffe2" else [])
        if self.library in ("horovod", "caffe2"):
            have.append("hierarchical")
        return tuple(have)

    def algorithms(self) -> tuple[str, ...]:
        """What it may pick from: ``only`` restricts; an algorithm it lacks is a ValueError."""
        have = self.available()
        missing = [a for a in self.only if a not in have]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} not available with {self.describe()} (it has: "
                f"{', '.join(have)})"
            )
        return self.only or have

    def describe(self) -> str:
        version = f" {self.nccl_version}" if self.backend == "nccl" else ""
        return f"{self.library} on {self.backend}{version}"


def span_s_per_byte(top: Topology, m: int) -> float:
    """Time per byte of a ring or tree that spans ``m`` nodes: its slowest link."""
    beta = top.intra.s_per_byte
    return max(beta, top.inter.s_per_byte) if m > 1 and top.inter else beta


def span_latency_s(top: Topology) -> float:
    """Latency of a hop between nodes (the intra-node link's where there is no network)."""
    return top.inter.latency_s if top.inter else top.intra.latency_s


def _floor_log2(m: int) -> int:
    return m.bit_length() - 1 if m > 0 else 0


# ---- NCCL ---------------------------------------------------------------------------------


def _hw_lat(link: Link, algorithm: str, p: int) -> float:
    kind = link.kind if link.kind in NCCL_HW_LAT else "pci"
    return NCCL_HW_LAT[kind][algorithm][p] * 1e-6


def _nccl_latency(top: Topology, algorithm: str, p: int, n: int, size: float) -> float:
    m, g = top.nodes(n), top.ranks_per_node(n)
    intra = _hw_lat(top.intra, algorithm, p) * (1.8 if m > 1 and p == 0 else 1.0)
    inter = _hw_lat(top.inter or Link(0, 0, "net"), algorithm, p)
    base = NCCL_BASE_LAT[algorithm][p] * 1e-6
    if algorithm == "tree":
        return base + 2 * ((g - 1) * intra + _floor_log2(m) * inter)
    steps, inter_steps = 2 * (n - 1), 2 * (m - 1)
    latency = base + (steps - inter_steps) * intra + inter_steps * inter
    plateau = p == 2 and m > 1 and size >= n / 16 * 65536  # the ring's plateau effect
    return latency * (1.9 if plateau else 1.0)


def _nccl_bus_bw(top: Topology, algorithm: str, p: int, m: int) -> float:
    """Bus bandwidth (bytes/s) of an (algorithm, protocol): the link's, NCCL's factors applied."""
    bus = 1 / span_s_per_byte(top, m)
    ll_max = NCCL_LL_MAX_BW[min(m, 3) - 1] * 1e9
    if algorithm == "tree":
        bus *= 0.92
        factor = (1 / 3.8, 7 / 9 if m == 1 else 0.915, 1.0)[p]
        bus *= factor
        return min(bus, ll_max) if p == 0 else bus
    if p == 0:
        return min(ll_max, bus / 4)
    return bus * (0.92 if p == 1 else 1.0)


def nccl_s(top: Topology, size: float, n: int, algorithm: str, ll128: bool) -> float:
    """NCCL's predicted time: the fastest of its protocols for this algorithm."""
    return min(_nccl_times(top, size, n, algorithm, ll128))[0]


def nccl_latency_s(top: Topology, size: float, n: int, algorithm: str, ll128: bool) -> float:
    """The latency part of NCCL's predicted time, for the protocol it picks at ``size``."""
    return min(_nccl_times(top, size, n, algorithm, ll128))[1]


def _nccl_times(
    top: Topology, size: float, n: int, algorithm: str, ll128: bool
) -> list[tuple[float, float]]:
    """(time, its latency part) of each protocol NCCL may use for this algorithm."""
    m = top.nodes(n)
    times = []
    for p in range(len(PROTOCOLS)):
        if p == 1 and not ll128:
            continue
        bus = _nccl_bus_bw(top, algorithm, p, m)
        alg_bw = bus * 0.5 if algorithm == "tree" else bus * n / (2 * (n - 1))
        if algorithm == "tree":
            log_size = _floor_log2(int(size) >> 6)
            if log_size < len(NCCL_TREE_CORRECTION[p]):
                alg_bw *= NCCL_TREE_CORRECTION[p][log_size]
        latency = _nccl_latency(top, algorithm, p, n, size)
        times.append((latency + size / alg_bw, latency))
    return times


# ---- alpha-beta-gamma (gloo, hierarchical) --------------------------------------------------


def ring_s(top: Topology, size: float, n: int) -> float:
    m = top.nodes(n)
    latency = 2 * (n - m) * top.intra.latency_s + 2 * (m - 1) * span_latency_s(top)
    return (
        latency + 2 * (n - 1) / n * size * span_s_per_byte(top, m) + (n - 1) / n * size * top.gamma
    )


def halving_doubling_cost(p: int) -> tuple[float, float, float]:
    """(latency hops, beta factor, gamma factor) of recursive halving-doubling on p ranks."""
    if p <= 1:
        return 0.0, 0.0, 0.0
    lower = 1 << _floor_log2(p)
    hops, beta, gamma = 2 * _floor_log2(lower), 2 * (lower - 1) / lower, (lower - 1) / lower
    if lower == p:
        return hops, beta, gamma
    return hops + 2, beta + 2, gamma + 1  # the extra ranks fold in first, get the result back


def halving_doubling_s(top: Topology, size: float, n: int) -> float:
    m = top.nodes(n)
    hops, beta, gamma = halving_doubling_cost(n)
    alpha = span_latency_s(top) if m > 1 else top.intra.latency_s
    return hops * alpha + beta * size * span_s_per_byte(top, m) + gamma * size * top.gamma


def hierarchical_s(top: Topology, size: float, n: int) -> float:
    m, g = top.nodes(n), top.ranks_per_node(n)
    if m == 1:
        return ring_s(top, size, n)
    inside = 2 * (g - 1) * top.intra.latency_s + 2 * (g - 1) / g * size * top.intra.s_per_byte
    inside += (g - 1) / g * size * top.gamma
    hops, beta, gamma = halving_doubling_cost(m)
    shard = size / g  # each of the g ranks all-reduces its shard across nodes, in parallel
    across = (
        hops * span_latency_s(top) + beta * size * top.inter.s_per_byte + gamma * shard * top.gamma
    )
    return inside + across


Cost = Callable[[Topology, float, int], float]


def cost_function(library: Library, algorithm: str) -> Cost:
    """The time of ``algorithm`` as ``library`` runs it."""
    if algorithm == "hierarchical":
        return hierarchical_s
    if algorithm == "halving-doubling":
        return halving_doubling_s
    if library.backend == "nccl":
        return lambda top, size, n: nccl_s(top, size, n, algorithm, library.nccl_ll128)
    return ring_s


def allreduce(top: Topology, size: float, n: int, library: Library) -> tuple[float, str]:
    """Seconds for the fastest available algorithm on ``size`` bytes over ``n`` ranks, and its
    name."""
    if n <= 1:
        return 0.0, "none"
    times = {a: cost_function(library, a)(top, size, n) for a in library.algorithms()}
    best = min(times, key=times.__getitem__)
    return times[best], best


def latency_s(top: Topology, size: float, n: int, library: Library) -> float:
    """The latency part of the all-reduce ``allreduce`` picks for ``size`` bytes over ``n``
    ranks: what grows with N whatever the message (NCCL's ring 2(N-1) hops, its tree
    2((g-1) + log2 m) hops; gloo's ring 2(N-1) alpha, halving-doubling 2 lg N alpha)."""
    if n <= 1:
        return 0.0
    algorithm = allreduce(top, size, n, library)[1]
    if library.backend == "nccl" and algorithm in ("ring", "tree"):
        return nccl_latency_s(top, size, n, algorithm, library.nccl_ll128)
    return cost_function(library, algorithm)(top, 0.0, n)  # alpha-beta: its time at 0 bytes
