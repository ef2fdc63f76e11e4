"""The one gate every results reader goes through: which files below a tree are trusted.

A run.json is trusted only when its required keys are there, every key (nested ones included) is
one of ``dpsuite.results.schema``'s, every value has its type, is finite and within its range
(all as the schema's fields declare them), its status and pid make sense, it is where its run id
says (its directory's name), once, and its config (whatever schema version it claims) still
hashes to its run id. A comm-bench result is trusted when its JSON and its CSV hold the schema's
keys and columns, of their types, finite and within their ranges. Only regular files are opened
(a FIFO named run.json would block the reader); a symlinked directory is followed, each
directory read once; a directory that cannot be read is a warning, never silence. Everything
left out is one warning naming the file and the field.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from dpsuite.results import schema
from dpsuite.results.store import STATUSES, make_run_id, read_json, run_identity

# Versions of the schema a reader understands; all of them carry a config that hashes to the id.
SCHEMA_VERSIONS = (1, 2)
# A process id the kernel can hand out (pid_t is a C int).
MAX_PID = 2**31 - 1
# What a machine's name may hold: it names files and lines of Markdown tables. New tags are held
# to this; a recorded one (older versions took any text) only to a single line of table text.
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
RECORDED_TAG = re.compile(r"[^\x00-\x1f\x7f|`]{1,200}")


class Untrusted(ValueError):
    """Why a record cannot be taken as a result (names the field)."""


def is_regular(path: Path) -> bool:
    """True for a regular file (after symlinks); False for a FIFO, device, directory, nothing."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _directory_key(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a directory after symlinks: what says two paths are one directory."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _unreadable(exc: OSError) -> None:
    warnings.warn(f"skipping unreadable directory {exc.filename}: {exc.strerror}", stacklevel=6)


def _walk_one(
    top: str, names: tuple[str, ...], visited: set, found: dict[str, list[Path]]
) -> list[str]:
    """Collect ``names`` below ``top`` without following symlinks; return the symlinked
    directories met (to be walked after every real one, so that a real path is preferred)."""
    links = []
    for here, dirs, files in os.walk(top, onerror=_unreadable):
        key = _directory_key(here)
        # a symlink to a directory read already, or to an ancestor (a loop)
        if key is not None and key in visited:
            warnings.warn(f"skipping {here}: a link to a directory already read", stacklevel=5)
            dirs[:] = []
            continue
        visited.add(key)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:  # os.walk lists a directory it cannot enter without saying so
            full = os.path.join(here, d)
            if not os.access(full, os.R_OK | os.X_OK):
                _unreadable(PermissionError(13, os.strerror(13), full))
        linked = [d for d in dirs if os.path.islink(os.path.join(here, d))]
        links += [
            os.path.join(here, d) for d in linked if os.access(os.path.join(here, d), os.X_OK)
        ]
        dirs[:] = [d for d in dirs if d not in linked]
        for name in names:
            if name in files:
                found[name].append(Path(here) / name)
    return links


def walk_tree(root: Path, names: tuple[str, ...]) -> dict[str, list[Path]]:
    """Every file called one of ``names`` below ``root``, by name, each list sorted: one walk
    (as ``walk_files`` walks) for several kinds of file."""
    found: dict[str, list[Path]] = {name: [] for name in names}
    visited: set[tuple[int, int] | None] = set()
    pending = [str(root)]
    while pending:
        pending += _walk_one(pending.pop(0), names, visited, found)
    return {name: sorted(files) for name, files in found.items()}


# (root, name) -> the files and the warnings of the one walk ``shared_walk`` made for them.
_SHARED_WALKS: dict[tuple[Path, str], tuple[list[Path], list[warnings.WarningMessage]]] = {}


def walk_files(root: Path, name: str) -> list[Path]:
    """Every file called ``name`` below ``root`` (hidden directories skipped), sorted. Symlinked
    directories are followed, each directory read once (a link back up is no loop); a
    directory that cannot be read is a warning."""
    shared = _SHARED_WALKS.get((root, name))
    if shared is None:
        return walk_tree(root, (name,))[name]
    files, said = shared
    for warning in said:  # each reader warns as a walk of its own would have
        warnings.warn(warning.message, stacklevel=2)
    return list(files)


@contextlib.contextmanager
def shared_walk(root: Path, names: tuple[str, ...]) -> Iterator[None]:
    """Within the block, ``walk_files(root, name)`` for each of ``names`` takes its files from
    one walk of the tree (a large tree costs a walk per kind of file otherwise), with the
    warnings a walk of its own gives."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        found = walk_tree(root, names)
    for name in names:
        _SHARED_WALKS[(root, name)] = (found[name], said)
    try:
        yield
    finally:
        for name in names:
            _SHARED_WALKS.pop((root, name), None)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# One test per schema type, only the field's own run: every key of every run.json comes here.
TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    # a count computed in floating point (32.0) is still a count
    "int": lambda v: _number(v) and (isinstance(v, int) or float(v).is_integer()),
    "float": _number,
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "mapping": lambda v: isinstance(v, Mapping),
    "list": lambda v: isinstance(v, list),
}


def _check_type(name: str, value: Any, kind: str) -> None:
    if not TYPE_CHECKS[kind](value):
        raise Untrusted(f"{name} is {type(value).__name__} {value!r:.40}, not {kind}")


def _out_of_range(field: schema.Field, value: float) -> str | None:
    """Why a finite number is outside the field's declared range, or None."""
    too_low = field.least is not None and (
        value <= field.least if field.strict else value < field.least
    )
    if field.least is not None and field.most is not None:
        return f"outside {field.range}" if too_low or value > field.most else None
    if too_low:
        return f"{'not above' if field.strict else 'below'} {field.least:g}"
    if field.most is not None and value > field.most:
        return f"above {field.most:g}"
    return None


def _check_range(name: str, field: schema.Field, value: Any) -> None:
    if not _number(value):
        return
    if not math.isfinite(value):
        raise Untrusted(f"{name} is {value!r}, not a finite number")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise Untrusted(f"{name} is {value}, beyond a 64-bit integer")
    # A loss or a gradient statistic of a diverging run can be huge; a time or a rate cannot.
    if field.measured and abs(value) > schema.MAX_MAGNITUDE:
        raise Untrusted(f"{name} is {value!r}, not a measurement")
    reason = _out_of_range(field, value)
    if reason:
        raise Untrusted(f"{name} is {value!r}, {reason}")


# The exact types a JSON value of each schema type arrives as: a value of one of them that is
# also in range passes without the general checks (every key of every run.json comes here, a
# million of them in a large tree); anything else goes through them, and they name the field.
PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "mapping": (dict,),
    "list": (list,),
}
INT64 = 2**63


class _Rule:
    """One schema field as the quick check reads it: its plain types and its bounds."""

    __slots__ = ("field", "plain", "numeric", "least", "most", "strict", "largest")

    def __init__(self, field: schema.Field) -> None:
        self.field = field
        self.plain = PLAIN_TYPES.get(field.type, ())
        self.numeric = field.numeric
        self.least = -math.inf if field.least is None else field.least
        self.most = math.inf if field.most is None else field.most
        self.strict = field.strict
        self.largest = schema.MAX_MAGNITUDE if field.measured else INT64

    def plainly_in_range(self, value: float) -> bool:
        """A finite int or float within the field's bounds (False: let the full check say)."""
        if not -self.largest < value < self.largest:  # NaN and infinities fail here too
            return False
        above = value > self.least if self.strict else value >= self.least
        return above and value <= self.most


# Each schema's fields by name and its required names, built once per tuple of fields.
_RULES: dict[int, tuple[tuple[schema.Field, ...], dict[str, _Rule], tuple[str, ...]]] = {}


def _rules(fields: tuple[schema.Field, ...]) -> tuple[dict[str, _Rule], tuple[str, ...]]:
    entry = _RULES.get(id(fields))
    if entry is None or entry[0] is not fields:
        by_name = {f.name: _Rule(f) for f in fields}
        entry = (fields, by_name, tuple(f.name for f in fields if f.required))
        _RULES[id(fields)] = entry
    return entry[1], entry[2]


def _check_fields(prefix: str, data: Mapping[str, Any], fields: tuple[schema.Field, ...]) -> None:
    """The required keys present; every key known, of its type (null: not measured), finite and
    in range; a mapping whose keys the schema describes, checked the same way."""
    by_name, required = _rules(fields)
    missing = [name for name in required if data.get(name) is None]
    if missing:
        raise Untrusted(f"{prefix}{missing[0]} is missing")
    for key, value in data.items():
        rule = by_name.get(key)
        if rule is None:
            raise Untrusted(f"unknown key {prefix}{key}")
        if value is None:
            continue
        if type(value) in rule.plain and (not rule.numeric or rule.plainly_in_range(value)):
            if rule.field.fields:
                _check_fields(f"{prefix}{key}.", value, rule.field.fields)
            continue
        _check_value(f"{prefix}{key}", value, rule.field)


def _check_value(name: str, value: Any, field: schema.Field) -> None:
    """The full check of one value: its type, finite and in range, and a mapping's keys."""
    _check_type(name, value, field.type)
    _check_range(name, field, value)
    if field.fields:
        _check_fields(f"{name}.", value, field.fields)


def _check_tag(hardware: Any) -> None:
    tag = hardware.get("tag") if isinstance(hardware, Mapping) else None
    if tag is not None and not (isinstance(tag, str) and RECORDED_TAG.fullmatch(tag)):
        raise Untrusted(f"hardware.tag {tag!r:.40} is not a machine name")


def check_record(rec: Any) -> None:
    """Raise Untrusted (naming the field) unless ``rec`` is a run.json as a run writes it."""
    if not isinstance(rec, dict):
        raise Untrusted("not a run record (a JSON object)")
    _check_fields("", rec, schema.RUN)
    if rec["schema_version"] not in SCHEMA_VERSIONS:
        raise Untrusted(f"schema_version {rec['schema_version']} is not one this version reads")
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
    _check_tag(rec.get("hardware"))


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
def check_comm_meta(meta: Any) -> None:
    """Raise Untrusted (naming the key) unless ``meta`` is a comm_bench.json as comm-bench
    writes it."""
    if not isinstance(meta, dict):
        raise Untrusted("not a comm-bench record (a JSON object)")
    _check_fields("", meta, schema.COMM_BENCH_META)
    _check_tag(meta.get("hardware"))


def _expected(field: schema.Field) -> str:
    return f"a finite {field.type} {field.range}".rstrip()


def check_comm_rows(frame) -> None:
    """A comm_bench.csv's rows as ``schema.COMM_BENCH_ROWS`` declares them (``check_rows``)."""
    check_rows(frame, schema.COMM_BENCH_ROWS)


def check_input_meta(meta: Any) -> None:
    """Raise Untrusted (naming the key) unless ``meta`` is an input_bench.json as input-bench
    writes it."""
    if not isinstance(meta, dict):
        raise Untrusted("not an input-bench record (a JSON object)")
    _check_fields("", meta, schema.INPUT_BENCH_META)
    _check_tag(meta.get("hardware"))


def check_rows(frame, fields: tuple[schema.Field, ...]) -> None:
    """The required columns and no unknown one; every cell of a numeric column a finite number
    of its type within its range (as ``fields`` declare them)."""
    import pandas as pd

    by_name = {f.name: f for f in fields}
    missing = [f.name for f in fields if f.required and f.name not in frame]
    if missing:
        raise Untrusted(f"missing columns {missing}")
    unknown = [str(c) for c in frame.columns if c not in by_name]
    if unknown:
        raise Untrusted(f"unknown column {unknown[0]}")
    for field in fields:
        if not field.numeric or field.name not in frame:
            continue
        values = pd.to_numeric(frame[field.name], errors="coerce")
        largest = schema.MAX_MAGNITUDE if field.measured else math.inf
        ok = values.notna() & values.abs().lt(math.inf) & values.abs().le(largest)
        if field.least is not None:
            ok &= values.gt(field.least) if field.strict else values.ge(field.least)
        if field.most is not None:
            ok &= values.le(field.most)
        if field.type == "int":
            ok &= values.mod(1).eq(0)
        if not ok.all():
            value = frame[field.name][~ok].iloc[0]
            raise Untrusted(f"{field.name} is {value} in a row, not {_expected(field)}")
