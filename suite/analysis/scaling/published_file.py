"""A table of measured scaling (``dpsuite predict --published FILE``): the shipped
``published.yaml``'s format, read strictly so a user's own table is checked before it is used.

The file is a YAML list of entries, one per measured result. Each entry has:

* ``label`` (text, unique), ``published_efficiency`` (in (0, 1]: throughput per GPU at
  ``workers`` over that at ``baseline_workers``), ``workers`` and ``baseline_workers`` (whole
  numbers, the baseline fewer), ``profile`` (a shipped profile or a profile file's path, relative
  to the table), ``batch`` (per GPU), ``single_gpu_samples_per_s`` (> 0);
* ``params`` (> 0) or ``tensors`` (a shipped model of ``published_tensors.yaml`` or a tensor-list
  file, as ``--dump-tensors`` writes, relative to the table);
* optional: ``family`` and ``publication`` (text), ``bucket_mb`` (>= 0, default 25; 0: each tensor
  all-reduced on its own), ``grad_dtype``,
  ``backend``, ``nccl_version``, ``library``, ``algorithms`` (a list), ``nccl_channels``,
  ``measured_efficiency`` (``{workers: K, efficiency: E}``, K between the baseline and
  ``workers``), ``smaller_counts`` (``{K: E, ...}``: the efficiency at each count below the row's,
  for leave-last-out), ``grad_accum`` (whole number, default 1: micro-batches of ``batch`` a
  step, gradients all-reduced once), ``overlap`` (true or false, default true: whether the
  all-reduce overlaps the backward pass; false e.g. for apex's ``delay_allreduce``),
  ``data_backend`` and ``source_commit`` (text).

Every problem is reported, one line each, naming the entry and the key: a key given twice, a
key not among these, a missing one, or a value of the wrong kind or range.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from dpsuite.analysis.scaling import strict_yaml
from dpsuite.analysis.scaling.allreduce_cost import ALGORITHM_NAMES, BACKENDS, LIBRARIES
from dpsuite.analysis.scaling.model import GRAD_DTYPE_BYTES
from dpsuite.errors import UserError, did_you_mean

REQUIRED = (
    "label",
    "published_efficiency",
    "workers",
    "baseline_workers",
    "profile",
    "batch",
    "single_gpu_samples_per_s",
)
OPTIONAL = (
    "family",
    "publication",
    "params",
    "tensors",
    "bucket_mb",
    "grad_dtype",
    "backend",
    "nccl_version",
    "library",
    "algorithms",
    "nccl_channels",
    "measured_efficiency",
    "smaller_counts",
    "grad_accum",
    "overlap",
    "data_backend",
    "source_commit",
)
KEYS = REQUIRED + OPTIONAL
CHOICES = {"grad_dtype": tuple(GRAD_DTYPE_BYTES), "backend": BACKENDS, "library": LIBRARIES}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _number(value: Any) -> float | None:
    """A number, or None; YAML 1.1 reads 23.9e6 (no sign after e) as text, so such text too."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _positive(value: Any, zero: bool = False) -> bool:
    number = _number(value)
    return number is not None and math.isfinite(number) and (number >= 0 if zero else number > 0)


def _efficiency(value: Any) -> bool:
    return _positive(value) and float(value) <= 1


def _counts_problems(entry: dict[str, Any]) -> list[str]:
    """``measured_efficiency`` and ``smaller_counts``: counts between the baseline and the row's."""
    problems, low, high = [], entry.get("baseline_workers"), entry.get("workers")
    inside = (lambda k: _whole(k) and low < k < high) if _whole(low) and _whole(high) else _whole
    measured = entry.get("measured_efficiency")
    if measured is not None:
        ok = isinstance(measured, dict) and set(measured) == {"workers", "efficiency"}
        if not ok or not inside(measured["workers"]) or not _efficiency(measured["efficiency"]):
            problems.append(
                "measured_efficiency must be {workers: K, efficiency: E}, K between "
                "baseline_workers and workers, E in (0, 1]"
            )
    smaller = entry.get("smaller_counts")
    if smaller is not None:
        ok = isinstance(smaller, dict) and smaller
        if not ok or not all(inside(k) and _efficiency(v) for k, v in smaller.items()):
            problems.append(
                "smaller_counts must map counts between baseline_workers and workers to "
                "efficiencies in (0, 1]"
            )
    return problems


def _value_problems(entry: dict[str, Any]) -> list[str]:
    """Each given value's kind and range."""
    problems = []
    for key in ("workers", "baseline_workers", "batch", "nccl_channels", "grad_accum"):
        if key in entry and not _whole(entry[key]):
            problems.append(f"{key} must be a whole number >= 1, got {entry[key]!r}")
    for key in ("single_gpu_samples_per_s", "params"):
        if key in entry and not _positive(entry[key]):
            problems.append(f"{key} must be a finite number > 0, got {entry[key]!r}")
    if "bucket_mb" in entry and not _positive(entry["bucket_mb"], zero=True):
        problems.append(f"bucket_mb must be a finite number >= 0, got {entry['bucket_mb']!r}")
    if "published_efficiency" in entry and not _efficiency(entry["published_efficiency"]):
        problems.append(
            f"published_efficiency must be in (0, 1], got {entry['published_efficiency']!r}"
        )
    if "overlap" in entry and not isinstance(entry["overlap"], bool):
        problems.append(f"overlap must be true or false, got {entry['overlap']!r}")
    for key, choices in CHOICES.items():
        if key in entry and entry[key] not in choices:
            problems.append(f"{key} must be one of {', '.join(choices)}, got {entry[key]!r}")
    algorithms = entry.get("algorithms", [])
    if not isinstance(algorithms, list) or any(a not in ALGORITHM_NAMES for a in algorithms):
        problems.append(f"algorithms must be a list of {', '.join(ALGORITHM_NAMES)}")
    low, high = entry.get("baseline_workers"), entry.get("workers")
    if _whole(low) and _whole(high) and low >= high:
        problems.append(f"baseline_workers ({low}) must be fewer than workers ({high})")
    if ("params" in entry) == ("tensors" in entry):
        problems.append("give params or tensors, one of them")
    return problems + _counts_problems(entry)


def entry_problems(entry: Any) -> list[str]:
    """What is wrong with one entry (empty: nothing)."""
    if not isinstance(entry, dict):
        return ["an entry is a mapping of keys"]
    problems = [f"unknown key {k}{did_you_mean(str(k), KEYS)}" for k in entry if k not in KEYS]
    problems += [f"missing key {k}" for k in REQUIRED if k not in entry]
    return problems + _value_problems(entry)


def _resolved(entry: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Profile and tensor files named relative to the table, made absolute."""
    out = dict(entry, family=entry.get("family", "yours"), publication=entry.get("publication", ""))
    out.setdefault("bucket_mb", 25)
    for key, suffix in (("profile", ".yaml"), ("tensors", "")):
        value = str(out.get(key, ""))
        if value and (folder / value).is_file() and (suffix == "" or value.endswith(suffix)):
            out[key] = str(folder / value)
    return out


def load_published(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a table file, each checked; every problem is one line of the UserError."""
    path = Path(path)
    try:
        raw = strict_yaml.load(path.read_text())
    except OSError as exc:
        raise UserError(f"--published {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"--published {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, list) or not raw:
        raise UserError(f"--published {path}: a table is a non-empty YAML list of entries")
    lines, labels = [], set()
    for i, entry in enumerate(raw, 1):
        label = entry.get("label") if isinstance(entry, dict) else None
        where = f"--published {path}: entry {i}" + (f" ({label})" if label else "")
        if label is not None and str(label) in labels:
            lines.append(f"{where}: label given to an earlier entry too")
        labels.add(str(label))
        lines += [f"{where}: {problem}" for problem in entry_problems(entry)]
    if lines:  # the CLI prefixes the first line; the others get the same prefix here
        raise UserError("\ndpsuite: error: ".join(lines))
    return [_resolved(entry, path.parent) for entry in raw]
