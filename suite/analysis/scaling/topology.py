"""Where the ranks sit: GPUs per node, the link between GPUs of one node and the network between
nodes.

Every real cluster has two kinds of link. Inside a node the GPUs talk over NVLink or PCIe (on a
CPU machine: shared memory), fast and with latencies of a few microseconds; between nodes they
share the node's network cards, an order of magnitude slower. Ranks fill nodes in order, so N
ranks on nodes of G GPUs use ceil(N / G) nodes and min(N, G) ranks per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpsuite.analysis.scaling.network_payload import Framing


@dataclass(frozen=True)
class Link:
    """A link: latency per message hop (s), bandwidth per direction (bytes/s of payload) and its
    kind ("nvlink", "pci", "net"; None when fitted), which picks NCCL's latencies per hop;
    ``framing``: the transport whose headers took the rest of a network's line rate (None when
    the bandwidth was measured or stated as payload)."""

    latency_s: float
    bandwidth_Bps: float
    kind: str | None = None
    framing: Framing | None = None

    @property
    def line_Bps(self) -> float:
        """The rate the link is stated at: its payload and the headers ``framing`` adds."""
        return self.bandwidth_Bps / self.framing.fraction if self.framing else self.bandwidth_Bps

    @property
    def s_per_byte(self) -> float:
        return 1.0 / self.bandwidth_Bps if self.bandwidth_Bps > 0 else math.inf


@dataclass(frozen=True)
class Topology:
    """Ranks per node, the intra-node link (per GPU), the inter-node link (per node: all NICs).

    ``gpus_per_node=None`` is a single node of any size: every rank on one link, the model of a
    machine measured alone, whose network to other nodes nobody measured. ``gamma``: seconds per
    byte of the reduction (a CPU's additions for gloo; 0 where the link's fitted or stated
    bandwidth already includes it, as NCCL's bus bandwidth does).
    """

    intra: Link
    inter: Link | None = None
    gpus_per_node: int | None = None
    gamma: float = 0.0

    def nodes(self, n: int) -> int:
        if self.gpus_per_node is None or self.inter is None:
            return 1
        return math.ceil(n / self.gpus_per_node)

    def ranks_per_node(self, n: int) -> int:
        return math.ceil(n / self.nodes(n))

    def describe(self) -> dict[str, float | int | str | None]:
        inter = self.inter or Link(math.nan, math.nan)
        return {
            "gpus_per_node": self.gpus_per_node,
            "intra_latency_us": self.intra.latency_s * 1e6,
            "intra_bandwidth_GBps": self.intra.bandwidth_Bps / 1e9,
            "inter_latency_us": inter.latency_s * 1e6,
            "inter_bandwidth_GBps": inter.bandwidth_Bps / 1e9,  # payload
            "inter_line_GBps": inter.line_Bps / 1e9,
            "inter_transport": inter.framing.transport if inter.framing else None,
        }
