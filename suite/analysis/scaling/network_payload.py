"""The share of a network link's line rate that carries data: every packet also spends bytes on
the wire on its headers and trailers.

A NIC's stated speed (25 Gbit/s Ethernet, 100 Gb/s EDR InfiniBand) is its line data rate; an
all-reduce moves payload. Per packet of P payload bytes a transport adds H bytes, so the link
carries P / (P + H) of its rate as data. Headers counted (bytes):

* Ethernet, on the wire: preamble and start delimiter 8, MAC header 14, FCS 4, the minimum
  inter-frame gap 12 (IEEE 802.3): 38 a frame.
* InfiniBand: LRH 8, BTH 12, ICRC 4, VCRC 2 (InfiniBand Architecture Specification, vol. 1):
  26; the largest MTU, 4096 bytes of payload, is what fabrics from FDR on run.
* RoCE v1: Ethernet 38, GRH 40, BTH 12, ICRC 4: 94. RoCE v2: Ethernet 38, IPv4 20, UDP 8, BTH
  12, ICRC 4: 82 (InfiniBand Architecture Specification, annexes A16 and A17). With Ethernet's
  default MTU of 1500, the RDMA MTU is 1024 bytes: the largest InfiniBand MTU that fits in 1500
  less the RDMA headers (Linux, ``include/rdma/ib_addr.h``, ``iboe_get_mtu``).
* TCP over IPv4: Ethernet 38, IPv4 20, TCP 20, the timestamps option 12 (on by default in
  Linux): 90; with the 1500-byte MTU, 1448 bytes of payload a segment.

Acknowledgements travel the other way and are not counted; nor are the symbols of the physical
layer, which the line data rate already excludes (64b/66b).
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER_BYTES = {"infiniband": 26, "roce-v1": 94, "roce-v2": 82, "tcp": 90}
DEFAULT_PAYLOAD_BYTES = {"infiniband": 4096, "roce-v1": 1024, "roce-v2": 1024, "tcp": 1448}
TRANSPORTS = tuple(HEADER_BYTES)


@dataclass(frozen=True)
class Framing:
    """A network transport and the payload bytes of its packets."""

    transport: str
    payload_bytes: int

    @property
    def fraction(self) -> float:
        """The share of the line rate that is payload."""
        return self.payload_bytes / (self.payload_bytes + HEADER_BYTES[self.transport])

    def describe(self) -> str:
        wire = self.payload_bytes + HEADER_BYTES[self.transport]
        return f"{self.transport}, {self.payload_bytes} of {wire} bytes a packet are payload"


def framing(transport: str, payload_bytes: int | None = None) -> Framing:
    """A transport's framing, its default payload unless given; an unknown transport is a
    ValueError."""
    if transport not in HEADER_BYTES:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    return Framing(transport, payload_bytes or DEFAULT_PAYLOAD_BYTES[transport])
