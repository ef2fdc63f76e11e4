"""A tensor list as a file (``dpsuite predict --tensors FILE``, written by ``--dump-tensors``).

The file is YAML: ``numels``, the elements of each trainable parameter tensor in registration
order (the order DDP packs its buckets in; whole numbers >= 1); optional ``backward_mflops``,
the backward-pass work of each tensor's layer (numbers >= 0, as many as ``numels``; without
it the buckets are ready by their share of the bytes); optional ``workload`` and ``source``,
text saying what the list is of. It is read strictly: a key given twice, a key not among these,
or a value of the wrong kind is an error naming the key and the entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dpsuite.analysis.scaling import strict_yaml
from dpsuite.errors import UserError, did_you_mean

TENSOR_KEYS = ("workload", "source", "numels", "backward_mflops")


@dataclass(frozen=True)
class TensorList:
    """Elements of each gradient tensor, and the backward work of each (empty: not known)."""

    numels: tuple[int, ...]
    backward_mflops: tuple[float, ...] = ()
    workload: str = ""
    source: str = ""


def parse_tensors(raw: Any) -> TensorList:
    """A tensor list from its YAML mapping; a ValueError names the first problem."""
    if not isinstance(raw, dict):
        raise ValueError("a tensor list is a mapping with numels: [...]")
    for key in raw:
        if key not in TENSOR_KEYS:
            raise ValueError(f"unknown key {key}{did_you_mean(str(key), TENSOR_KEYS)}")
    numels = raw.get("numels")
    if not isinstance(numels, list) or not numels:
        raise ValueError("numels must be a non-empty list of whole numbers >= 1")
    for i, n in enumerate(numels):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"numels[{i}] must be a whole number >= 1, got {n!r}")
    work = raw.get("backward_mflops") or []
    if not isinstance(work, list) or (work and len(work) != len(numels)):
        raise ValueError(f"backward_mflops must be a list of {len(numels)} numbers, one a tensor")
    for i, w in enumerate(work):
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
            raise ValueError(f"backward_mflops[{i}] must be a finite number >= 0, got {w!r}")
    if work and sum(work) <= 0:
        raise ValueError("backward_mflops are all 0: give none, or each layer's work")
    return TensorList(
        tuple(numels),
        tuple(float(w) for w in work),
        str(raw.get("workload") or ""),
        str(raw.get("source") or ""),
    )


def load_tensors(path: str | Path) -> TensorList:
    """The tensor list of a file; a missing or bad one is one UserError."""
    try:
        return parse_tensors(strict_yaml.load(Path(path).read_text()))
    except OSError as exc:
        raise UserError(f"--tensors {path}: cannot read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise UserError(f"--tensors {path}: {str(exc).splitlines()[0]}") from None


def dump_tensors(tensors: TensorList) -> str:
    """The tensor list as the YAML ``load_tensors`` reads."""
    raw: dict[str, Any] = {}
    if tensors.workload:
        raw["workload"] = tensors.workload
    if tensors.source:
        raw["source"] = tensors.source
    raw["numels"] = list(tensors.numels)
    if tensors.backward_mflops:
        raw["backward_mflops"] = list(tensors.backward_mflops)
    header = f"# {len(tensors.numels)} tensors, {sum(tensors.numels):,} parameters\n"
    return header + yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100)
