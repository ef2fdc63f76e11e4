"""The one gate every results reader goes through: which files below a tree are trusted.

A run.json is trusted only when every key is one of ``dpsuite.results.schema``'s, every value has
its type, is finite and within its range, its status and pid make sense, it is where its run id
says (its directory's name), once, and its config (whatever schema version it claims) still
hashes to its run id. A comm-bench result is trusted when its JSON and its CSV have their types,
finite values and ranges. Only regular files are opened (a FIFO named run.json would block the
reader); a directory that cannot be read is a warning, never silence. Everything left out is
one warning naming the file and the field.
"""

from __future__ import annotations

import math
import os
import re
import stat
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dpsuite.results import schema
from dpsuite.results.store import STATUSES, make_run_id, read_json, run_identity

# Versions of the schema a reader understands; all of them carry a config that hashes to the id.
SCHEMA_VERSIONS = (1, 2)
# Keys without which a record cannot be checked against its run id.
REQUIRED = ("schema_version", "run_id", "status", "workload", "mode", "workers", "global_batch")
REQUIRED += ("lr_rule", "seed", "config")
# No time, rate, size or count a run measures comes near this: a larger one is damage.
MAX_MAGNITUDE = 1e18
# A process id the kernel can hand out (pid_t is a C int).
MAX_PID = 2**31 - 1
# Units whose values are never negative, but for differences of two clocks (exposed_comm_s,
# and the communication timings read from the reducer's or a hook's timestamps).
NON_NEGATIVE_UNITS = {"s", "samples/s", "tokens/s", "count", "bytes", "MiB", "MB", "TFLOP/s"}
NON_NEGATIVE_UNITS |= {"FLOP", "epochs"}
SIGNED = {"exposed_comm_s", "comm_fraction", "comm_time_s", "comm_time_p90_s", "comm_wait_s"}
# Accuracies are fractions of the eval set.
UNIT_INTERVAL = {"target_acc", "final_eval_acc", "best_eval_acc"}
# What a machine's name may hold: it names files and lines of Markdown tables. New tags are held
# to this; a recorded one (older versions took any text) only to a single line of table text.
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
RECORDED_TAG = re.compile(r"[^\x00-\x1f\x7f|`]{1,200}")
LEAST = {"workers": 1, "global_batch": 1, "per_worker_batch": 1, "base_batch": 1}


class Untrusted(ValueError):
    """Why a record cannot be taken as a result (names the field)."""


def is_regular(path: Path) -> bool:
    """True for a regular file (after symlinks); False for a FIFO, device, directory, nothing."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def walk_files(root: Path, name: str) -> list[Path]:
    """Every file called ``name`` below ``root`` (hidden directories skipped), sorted; a
    directory that cannot be read is a warning."""

    def unreadable(exc: OSError) -> None:
        warnings.warn(f"skipping unreadable directory {exc.filename}: {exc.strerror}", stacklevel=4)

    found = []
    for here, dirs, files in os.walk(root, onerror=unreadable, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:  # os.walk lists a directory it cannot enter without saying so
            full = os.path.join(here, d)
            if not os.access(full, os.R_OK | os.X_OK):
                unreadable(PermissionError(13, os.strerror(13), full))
        if name in files:
            found.append(Path(here) / name)
    return sorted(found)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_type(name: str, value: Any, kind: str) -> None:
    ok = {
        # a count computed in floating point (32.0) is still a count
        "int": _number(value) and (isinstance(value, int) or float(value).is_integer()),
        "float": _number(value),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "mapping": isinstance(value, Mapping),
        "list": isinstance(value, list),
    }[kind]
    if not ok:
        raise Untrusted(f"{name} is {type(value).__name__} {value!r:.40}, not {kind}")


def _check_range(name: str, field: schema.Field, value: Any) -> None:
    if not _number(value):
        return
    if not math.isfinite(value):
        raise Untrusted(f"{name} is {value!r}, not a finite number")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise Untrusted(f"{name} is {value}, beyond a 64-bit integer")
    # A loss or a gradient statistic of a diverging run can be huge; a time or a rate cannot.
    if field.unit in NON_NEGATIVE_UNITS and abs(value) > MAX_MAGNITUDE:
        raise Untrusted(f"{name} is {value!r}, not a measurement")
    least = LEAST.get(field.name, 0)
    if field.unit in NON_NEGATIVE_UNITS and field.name not in SIGNED and value < least:
        raise Untrusted(f"{name} is {value!r}, below {least}")
    if field.name in UNIT_INTERVAL and not 0 <= value <= 1:
        raise Untrusted(f"{name} is {value!r}, outside [0, 1]")


def _check_fields(prefix: str, data: Mapping[str, Any], fields: tuple[schema.Field, ...]) -> None:
    """Known keys, each of its type (null: not measured), finite and in range."""
    by_name = {f.name: f for f in fields}
    for key, value in data.items():
        name = f"{prefix}{key}"
        field = by_name.get(key)
        if field is None:
            raise Untrusted(f"unknown key {name}")
        if value is None:
            continue
        _check_type(name, value, field.type)
        _check_range(name, field, value)


def check_record(rec: Any) -> None:
    """Raise Untrusted (naming the field) unless ``rec`` is a run.json as a run writes it."""
    if not isinstance(rec, dict):
        raise Untrusted("not a run record (a JSON object)")
    missing = [k for k in REQUIRED if rec.get(k) is None]
    if missing:
        raise Untrusted(f"{missing[0]} is missing")
    _check_fields("", rec, schema.RUN)
    if rec["schema_version"] not in SCHEMA_VERSIONS:
        raise Untrusted(f"schema_version {rec['schema_version']} is not one this version reads")
    metrics = rec.get("metrics") or {}
    _check_fields("metrics.", metrics, schema.METRICS)
    for name in ("grad_noise_scale",):
        _check_fields(f"metrics.{name}.", metrics.get(name) or {}, schema.GRAD_NOISE_SCALE)
    if rec["status"] not in STATUSES:
        raise Untrusted(f"status {rec['status']!r} is not one of {', '.join(STATUSES)}")
    pid = rec.get("pid")
    if pid is not None and not 1 <= pid <= MAX_PID:
        raise Untrusted(f"pid {pid} is not a process id")
    per_worker = rec.get("per_worker_batch")
    if per_worker is not None and per_worker * rec["workers"] != rec["global_batch"]:
        raise Untrusted(
            f"per_worker_batch {per_worker} x workers {rec['workers']} is not global_batch "
            f"{rec['global_batch']}"
        )
    tag = (rec.get("hardware") or {}).get("tag")
    if tag is not None and not (isinstance(tag, str) and RECORDED_TAG.fullmatch(tag)):
        raise Untrusted(f"hardware.tag {tag!r:.40} is not a machine name")


def hashes_to_its_id(rec: Mapping[str, Any]) -> bool:
    """The record's config, workers and batch give its run id (the run id is the config's hash)."""
    try:
        identity = run_identity(rec["config"], rec["workers"], rec["global_batch"])
        return make_run_id(rec, identity) == rec["run_id"]
    except (KeyError, TypeError, AttributeError, ValueError):
        return False


def distrust(rec: Mapping[str, Any], run_dir: Path, seen: set[str]) -> str | None:
    """Why a checked run.json cannot be taken as the result of its run id, or None."""
    run_id = rec["run_id"]
    if run_dir.name != run_id:
        return f"its run_id {run_id} is not its directory's name (a copied run directory?)"
    if run_id in seen:
        return f"run {run_id} was already read from another directory"
    if not hashes_to_its_id(rec):
        return "its config does not hash to its run id (edited by hand?)"
    return None


def read_record(file: Path) -> dict[str, Any]:
    """A run.json that passes ``check_record``; OSError/ValueError (Untrusted) otherwise."""
    if not is_regular(file):
        raise Untrusted("not a regular file")
    rec = read_json(file)
    check_record(rec)
    return rec


def trusted_runs(root: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(run directory, run.json) of every run below ``root`` that can be trusted; any other
    run.json is skipped with one warning naming it and why."""
    seen: set[str] = set()
    for file in walk_files(root, "run.json"):
        run_dir = file.parent
        try:
            rec = read_record(file)
        except Untrusted as exc:
            warnings.warn(f"skipping {file}: {exc}", stacklevel=3)
            continue
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping unreadable {file}: {exc}", stacklevel=3)
            continue
        reason = distrust(rec, run_dir, seen)
        if reason is not None:
            warnings.warn(f"skipping {file}: {reason}", stacklevel=3)
            continue
        seen.add(rec["run_id"])
        yield run_dir, rec


# ---- comm-bench results ----------------------------------------------------------------------
COMM_META = {"bench_id": "str", "world_size": "int", "backend": "str"}
# CSV columns that must be numbers, and the least each may be.
COMM_NUMERIC = {"size_bytes": 1, "count": 1, "time_us": 0, "algbw_GBps": 0, "busbw_GBps": 0}
COMM_NUMERIC["errors"] = 0


def check_comm_meta(meta: Any) -> None:
    if not isinstance(meta, dict):
        raise Untrusted("not a comm-bench record (a JSON object)")
    for key, kind in COMM_META.items():
        if meta.get(key) is not None:
            _check_type(key, meta[key], kind)
    if meta.get("world_size") is not None and meta["world_size"] < 1:
        raise Untrusted(f"world_size is {meta['world_size']}, below 1")
    hardware = meta.get("hardware")
    tag = hardware.get("tag") if isinstance(hardware, dict) else None
    if tag is not None and not (isinstance(tag, str) and RECORDED_TAG.fullmatch(tag)):
        raise Untrusted(f"hardware.tag {tag!r:.40} is not a machine name")


def check_comm_rows(frame) -> None:
    """Every numeric column of a comm-bench CSV a finite number within its range."""
    import pandas as pd

    for column, least in COMM_NUMERIC.items():
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = ~(values.notna() & values.abs().le(MAX_MAGNITUDE) & values.ge(least))
        if bad.any():
            raise Untrusted(f"{column} is {frame[column][bad].iloc[0]} in a row")
