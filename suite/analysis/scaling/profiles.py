"""Hardware profiles: YAML files describing a cluster node and its network, with their sources.

Shipped profiles live in ``profiles/`` next to this module (``dpsuite predict --profile NAME``);
any other file is given by its path. A profile has ``gpus_per_node``, ``peak_tflops`` per
precision, ``intra_node`` and ``inter_node`` links (``bandwidth_GB_s`` per direction: per GPU
inside a node, per node for the network; ``latency_us`` per hop for the alpha-beta algorithms;
``kind``: nvlink, pci or net, which picks NCCL's own latencies; for the network an optional
``transport``, infiniband, roce-v1, roce-v2 or tcp, and ``payload_bytes`` a packet, whose
headers take their share of the line rate: ``network_payload``), ``nccl_ll128`` (NCCL enables
its LL128 protocol there: Volta/Ampere on NVLink), an optional ``reduce_GB_s`` (the
reduction's rate, for gloo), optional ``sm_count`` (the GPU's streaming multiprocessors) and
``nccl_channels`` (the channels NCCL's all-reduce uses on one node: one SM each while it runs)
and ``sources``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dpsuite.analysis.scaling.network_payload import Framing, framing
from dpsuite.analysis.scaling.topology import Link, Topology
from dpsuite.errors import UserError

PROFILE_DIR = Path(__file__).with_name("profiles")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    topology: Topology
    peak_tflops: dict[str, float]
    sources: tuple[str, ...]
    nccl_ll128: bool = False
    sm_count: int | None = None
    nccl_channels: int | None = None

    def comm_sm_share(self, channels: int | None = None) -> float:
        """The fraction of a GPU's SMs NCCL's all-reduce holds while it runs: ``channels`` (else
        the profile's) / its SMs; 0 where either is not known."""
        channels = channels if channels is not None else self.nccl_channels
        if channels is None or self.sm_count is None:
            return 0.0
        return channels / self.sm_count

    def peak(self, precision: str) -> float:
        if precision not in self.peak_tflops:
            raise UserError(
                f"profile {self.name} has no peak for {precision} "
                f"(it has: {', '.join(self.peak_tflops)}); give --tflops"
            )
        return self.peak_tflops[precision]


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> Profile:
    """A shipped profile by name, or a profile file by path; bad ones are one UserError."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise UserError(
            f"unknown profile '{name_or_path}' (shipped: {', '.join(profile_names())}; "
            "or give the path of a profile file)"
        )
    try:
        raw = yaml.safe_load(path.read_text())
        return _parse(raw, path.stem)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise UserError(f"cannot read profile {path}: {detail}") from None


LINK_KINDS = ("nvlink", "pci", "net")


def _finite(value: Any, where: str) -> float:
    """A profile's number: YAML's .nan and .inf are typos, not hardware."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _link(raw: dict[str, Any], where: str, kind: str) -> Link:
    bandwidth = _finite(raw["bandwidth_GB_s"], f"{where}.bandwidth_GB_s")
    latency = _finite(raw["latency_us"], f"{where}.latency_us")
    if bandwidth <= 0 or latency < 0:
        raise ValueError(f"{where}: bandwidth_GB_s must be > 0 and latency_us >= 0")
    kind = str(raw.get("kind", kind))
    if kind not in LINK_KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(LINK_KINDS)}, got {kind}")
    wire = _framing(raw, where)
    payload = bandwidth * (wire.fraction if wire else 1.0)
    return Link(latency * 1e-6, payload * 1e9, kind, wire)


def _framing(raw: dict[str, Any], where: str) -> Framing | None:
    """The network's transport (its headers take part of the line rate); None: the bandwidth is
    taken as payload."""
    if "transport" not in raw:
        if "payload_bytes" in raw:
            raise ValueError(f"{where}: payload_bytes needs a transport")
        return None
    if where != "inter_node":
        raise ValueError(f"{where}: transport is a key of inter_node (the network) only")
    try:
        return framing(str(raw["transport"]), _count(raw, "payload_bytes"))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _count(raw: dict[str, Any], key: str) -> int | None:
    """An optional whole number >= 1 of a profile."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
    return value


def _parse(raw: Any, stem: str) -> Profile:
    if not isinstance(raw, dict):
        raise ValueError("a profile is a mapping of keys")
    gpus = raw["gpus_per_node"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus_per_node must be an integer >= 1, got {gpus!r}")
    peaks = {
        str(k): _finite(v, f"peak_tflops.{k}") for k, v in (raw.get("peak_tflops") or {}).items()
    }
    if any(v <= 0 for v in peaks.values()):
        raise ValueError("peak_tflops must be > 0")
    reduce_rate = float(raw.get("reduce_GB_s", 0) or 0)
    if reduce_rate < 0:
        raise ValueError("reduce_GB_s must be >= 0")
    topology = Topology(
        intra=_link(raw["intra_node"], "intra_node", "pci"),
        inter=_link(raw["inter_node"], "inter_node", "net"),
        gpus_per_node=gpus,
        gamma=1 / (reduce_rate * 1e9) if reduce_rate else 0.0,
    )
    return Profile(
        name=str(raw.get("name", stem)),
        description=str(raw.get("description", "")),
        topology=topology,
        peak_tflops=peaks,
        sources=tuple(str(s) for s in raw.get("sources") or ()),
        nccl_ll128=bool(raw.get("nccl_ll128", False)),
        sm_count=_count(raw, "sm_count"),
        nccl_channels=_check_channels(_count(raw, "nccl_channels"), _count(raw, "sm_count")),
    )


def _check_channels(channels: int | None, sms: int | None) -> int | None:
    if channels is not None and sms is not None and channels >= sms:
        raise ValueError(f"nccl_channels ({channels}) must be fewer than sm_count ({sms})")
    return channels
