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
and ``sources``. A profile is read strictly: a key given twice, a key not among these, or a number
outside its range (``BOUNDS``) is an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dpsuite.analysis.scaling import strict_yaml
from dpsuite.analysis.scaling.network_payload import Framing, framing
from dpsuite.analysis.scaling.topology import Link, Topology
from dpsuite.errors import UserError, did_you_mean

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
        raw = strict_yaml.load(path.read_text())
        return _parse(raw, path.stem)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise UserError(f"cannot read profile {path}: {detail}") from None


LINK_KINDS = ("nvlink", "pci", "net")
PROFILE_KEYS = (
    "name",
    "description",
    "gpus_per_node",
    "nccl_ll128",
    "sm_count",
    "nccl_channels",
    "peak_tflops",
    "reduce_GB_s",
    "intra_node",
    "inter_node",
    "sources",
)
LINK_KEYS = ("kind", "link", "bandwidth_GB_s", "latency_us", "transport", "payload_bytes")
# Each number's sane range, so a typo is an error rather than a prediction: (low, high).
BOUNDS = {
    "gpus_per_node": (1, 1024),  # an NVLink domain (NVL72) is 72; 1024 leaves room, 1e8 is a typo
    "sm_count": (1, 1024),  # the largest GPUs have under 200 SMs
    "nccl_channels": (1, 1024),  # at most one per SM
    "payload_bytes": (1, 65_536),  # a jumbo frame is 9000 bytes, an IP packet at most 64 KiB
    "bandwidth_GB_s": (0, 100_000),  # 100 TB/s: a hundred times NVLink 5's 900 GB/s
    "latency_us": (0, 1_000_000),  # a hop of over a second is no cluster network
    "peak_tflops": (0, 100_000),  # ten times the largest per-GPU peak (low precision, sparse)
    "reduce_GB_s": (0, 100_000),  # a reduction faster than any memory is a typo
}


def _known_keys(raw: dict[Any, Any], keys: tuple[str, ...], where: str = "") -> None:
    """Every key of ``raw`` one of ``keys``: a misspelt optional key is an error, not ignored."""
    for key in raw:
        if key not in keys:
            prefix = f"{where}." if where else ""
            hint = did_you_mean(str(key), keys, prefix)
            raise ValueError(f"unknown key {prefix}{key}{hint}")


def _bounded(value: float, key: str, where: str) -> float:
    low, high = BOUNDS[key]
    shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
    if value > high:
        raise ValueError(f"{where} must be at most {high:,}, got {shown}")
    if value < low:
        raise ValueError(f"{where} must be at least {low:,}, got {shown}")
    return value


def _finite(value: Any, where: str) -> float:
    """A profile's number: YAML's .nan and .inf are typos, not hardware."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _link(raw: Any, where: str, kind: str) -> Link:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is a mapping of keys ({', '.join(LINK_KEYS)})")
    _known_keys(raw, LINK_KEYS, where)
    bandwidth = _finite(raw["bandwidth_GB_s"], f"{where}.bandwidth_GB_s")
    latency = _finite(raw["latency_us"], f"{where}.latency_us")
    if bandwidth <= 0 or latency < 0:
        raise ValueError(f"{where}: bandwidth_GB_s must be > 0 and latency_us >= 0")
    _bounded(bandwidth, "bandwidth_GB_s", f"{where}.bandwidth_GB_s")
    _bounded(latency, "latency_us", f"{where}.latency_us")
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
    return int(_bounded(value, key, key))


def _parse(raw: Any, stem: str) -> Profile:
    if not isinstance(raw, dict):
        raise ValueError("a profile is a mapping of keys")
    _known_keys(raw, PROFILE_KEYS)
    gpus = _count(raw, "gpus_per_node")
    if gpus is None:
        raise KeyError("gpus_per_node")
    peaks = _peaks(raw.get("peak_tflops") or {})
    reduce_rate = _finite(raw.get("reduce_GB_s", 0) or 0, "reduce_GB_s")
    if reduce_rate < 0:
        raise ValueError("reduce_GB_s must be >= 0")
    _bounded(reduce_rate, "reduce_GB_s", "reduce_GB_s")
    ll128 = raw.get("nccl_ll128", False)
    if not isinstance(ll128, bool):
        raise ValueError(f"nccl_ll128 must be true or false, got {ll128!r}")
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
        nccl_ll128=ll128,
        sm_count=_count(raw, "sm_count"),
        nccl_channels=_check_channels(_count(raw, "nccl_channels"), _count(raw, "sm_count")),
    )


def _peaks(raw: Any) -> dict[str, float]:
    """``peak_tflops``: TFLOP/s per GPU at each precision, each > 0."""
    if not isinstance(raw, dict):
        raise ValueError("peak_tflops is a mapping of precision to TFLOP/s")
    peaks = {str(k): _finite(v, f"peak_tflops.{k}") for k, v in raw.items()}
    if any(v <= 0 for v in peaks.values()):
        raise ValueError("peak_tflops must be > 0")
    for k, v in peaks.items():
        _bounded(v, "peak_tflops", f"peak_tflops.{k}")
    return peaks


def _check_channels(channels: int | None, sms: int | None) -> int | None:
    if channels is not None and sms is not None and channels >= sms:
        raise ValueError(f"nccl_channels ({channels}) must be fewer than sm_count ({sms})")
    return channels
