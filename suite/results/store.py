"""Results on disk: one directory per run with run.json, epochs.csv and steps.csv.

Writes are crash-safe: run.json is replaced atomically (temp file + rename), epochs.csv is
appended and flushed row by row, so a killed run keeps every evaluation it finished.
Nothing here uses pickle.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import io
import json
import math
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dpsuite.errors import ResultsWriteError, UserError
from dpsuite.results import schema
from dpsuite.results.liveness import effective_status

SCHEMA_VERSION = 2
# Inside a results directory, besides one directory per run: attempts that run beside a result
# they may replace, and temporary files of running processes. Hidden, never read as results.
ATTEMPTS_DIR = ".attempts"
SCRATCH_DIR = ".dpsuite-tmp"
STATUSES = ("complete", "failed", "diverged", "running")
EPOCH_COLUMNS = schema.names(schema.EPOCHS)
STEP_COLUMNS = schema.names(schema.STEPS)
RANK_STEP_COLUMNS = schema.names(schema.STEPS_BY_RANK)
RANK_STEPS_CSV = "steps_by_rank.csv"
PROFILE_DIR = "profile"  # torch.profiler traces, one per rank (profile.steps)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def config_hash(identity: Mapping[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


# Config keys that do not change what a run measures, so they stay out of the run id. The
# hardware tag does change it when set (machine B's result is never machine A's).
NON_IDENTITY_KEYS = (
    "results_dir",
    "force",
    "cache_dir",
    "hardware",
    "checks",
    "ddp.start_method",
    "ddp.timeout_s",
    "data.load_timeout_s",
    "data.timeout_s",
    "train.save_params",
    "noise_scale",  # measured alongside; the training is the same whether it is on or off
    "timing.max_rank_steps",  # gathered once the run is over: nothing measured changes
)


LOADER_DEFAULTS = {
    "loader_workers": 0,
    "pin_memory": True,
    "persistent_workers": True,
    "prefetch_factor": 2,
}


def plain_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars), several times faster than
    ``copy.deepcopy``, which any other object still gets: every run read is hashed again."""
    if type(value) is dict:
        return {key: plain_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [plain_copy(item) for item in value]
    if value is None or type(value) in (str, int, float, bool):
        return value
    return copy.deepcopy(value)


# The config's mappings ``run_identity`` takes keys out of: copied; the rest are only read.
CHANGED_MAPPINGS = tuple(
    dict.fromkeys(["data", "optimizer", *(k.split(".")[0] for k in NON_IDENTITY_KEYS if "." in k)])
)


def _changeable_copy(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with a copy of each mapping ``run_identity`` changes (every run read is hashed
    again: copying all of it costs more than the hash); anything but plain JSON: all copied."""
    ident = dict(config)
    for key in CHANGED_MAPPINGS:
        value = ident.get(key)
        if type(value) is dict:
            ident[key] = dict(value)
        elif value is not None:
            return plain_copy(dict(config))
    return ident


def run_identity(config: Mapping[str, Any], workers: int, global_batch: int) -> dict[str, Any]:
    """The part of a resolved config that defines the experiment (what the run id hashes)."""
    ident = _changeable_copy(config)
    tag = (ident.get("hardware") or {}).get("tag")
    for dotted in NON_IDENTITY_KEYS:
        *parents, leaf = dotted.split(".")
        node = ident
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    if tag is not None:
        ident["hardware_tag"] = tag
    ident["workers"], ident["global_batch"] = workers, global_batch
    ident.pop("batch", None)  # per_worker/global are two spellings of one thing
    if ident.get("sync") == {"name": "allreduce"}:  # the default: all-reduce runs keep their ids
        ident.pop("sync")
    # Step options at their defaults: runs from before they existed keep their ids.
    if not any((ident.get("step") or {}).values()):
        ident.pop("step", None)
    # Profiling slows the steps it records (timed steps): part of the id when on, and runs
    # without it keep their ids.
    if not (ident.get("profile") or {}).get("steps"):
        ident.pop("profile", None)
    # Loader settings at their defaults: runs from before they existed keep their ids.
    data = ident.get("data") or {}
    for key, default in LOADER_DEFAULTS.items():
        if data.get(key) == default:
            data.pop(key)
    if not ident.get("data", True):  # no data key that changes a measurement: ids as before
        ident.pop("data")
    if (ident.get("optimizer") or {}).get("implementation") == "auto":
        ident["optimizer"].pop("implementation")
    return ident


def make_run_id(summary: Mapping[str, Any], identity: Mapping[str, Any]) -> str:
    """A readable, stable id: the same config always gives the same id."""
    sync = summary.get("sync", "allreduce")
    workload = str(summary["workload"]).replace(":", ".")  # an import path: no ':' in dir names
    return (
        f"{workload}-{summary['mode']}-w{summary['workers']}"
        f"-b{summary['global_batch']}-{summary['lr_rule']}-s{summary['seed']}"
        + ("" if sync == "allreduce" else f"-{sync}")
        + (f"-r{summary['repeat']}" if summary.get("repeat") else "")
        + f"-{config_hash(identity)}"
    )


def _json_safe(value: Any) -> Any:
    """Strict JSON: NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one.

    Raises ResultsWriteError (naming the file and the OS reason) when it cannot be written.
    """
    try:
        _write_json_atomic(path, data)
    except OSError as exc:
        raise ResultsWriteError(path, exc) from None


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_json_safe(dict(data)), indent=2, allow_nan=False) + "\n"
    replace_atomically(path, text.encode())


def replace_atomically(path: Path, blob: bytes) -> None:
    """Write ``path`` through a hidden temporary file renamed over it: readers see the old file
    or the new one, and a failed write (OSError) leaves no temporary file behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be shared
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_json(path: Path) -> dict[str, Any]:
    with open(path) as fh:
        return json.load(fh)


class RunWriter:
    """Owns one run directory; only rank 0 of a run writes through it."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.record: dict[str, Any] = {}
        self._lock = threading.Lock()  # the heartbeat thread writes too (``beat``)

    @property
    def run_json(self) -> Path:
        return self.dir / "run.json"

    def start(self, record: Mapping[str, Any]) -> None:
        """Create the directory, reset the CSVs and mark the run as running."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for name in ("epochs.csv", "steps.csv", RANK_STEPS_CSV):
                (self.dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.dir / PROFILE_DIR, ignore_errors=True)
        except OSError as exc:
            raise ResultsWriteError(self.dir, exc) from None
        self.record = {
            "schema_version": SCHEMA_VERSION,
            **record,
            "status": "running",
            "error": None,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": now_iso(),
            "finished_at": None,
            "heartbeat_at": now_iso(),
        }
        write_json_atomic(self.run_json, self.record)

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.record.update(fields, heartbeat_at=now_iso())
            write_json_atomic(self.run_json, self.record)

    def finish(self, status: str, error: str | None = None, **fields: Any) -> None:
        assert status in STATUSES, status
        with self._lock:
            self.record.update(fields, status=status, error=error, finished_at=now_iso())
            write_json_atomic(self.run_json, self.record)

    def beat(self) -> None:
        """Rewrite the heartbeat of a running run (``liveness.keep_beating``); a write that
        fails is left to the run's next own write to report."""
        with self._lock:
            if self.record.get("status") != "running":
                return
            self.record["heartbeat_at"] = now_iso()
            with contextlib.suppress(ResultsWriteError):
                write_json_atomic(self.run_json, self.record)

    def append_epoch(self, row: Mapping[str, Any]) -> None:
        append_csv(self.dir / "epochs.csv", EPOCH_COLUMNS, [row])

    def write_steps(self, rows: Iterable[Mapping[str, Any]]) -> None:
        append_csv(self.dir / "steps.csv", STEP_COLUMNS, rows)

    def write_rank_steps(self, rows: Iterable[Mapping[str, Any]]) -> None:
        append_csv(self.dir / RANK_STEPS_CSV, RANK_STEP_COLUMNS, rows)


def append_csv(path: Path, columns: list[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Append rows (a header first for a new file); ResultsWriteError when it cannot."""
    new = not path.exists()
    try:
        with open(path, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            if new:
                w.writeheader()
            for row in rows:
                w.writerow(row)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise ResultsWriteError(path, exc) from None


def read_status(run_dir: Path) -> str | None:
    """The effective status of a run directory, or None when it has no readable run.json."""
    try:
        rec = read_json(Path(run_dir) / "run.json")
    except (OSError, ValueError):
        return None
    return effective_status(rec)


# ---- collective microbenchmark results (`dpsuite comm-bench`) --------------------------------
# RESULTS_DIR/comm_bench/<bench_id>/comm_bench.json holds the metadata (hardware fingerprint,
# world_size, backend, dtype, warmup, iters, ...) and comm_bench.csv one row per collective and
# message size.
COMM_BENCH_JSON = "comm_bench.json"
COMM_BENCH_CSV = "comm_bench.csv"
COMM_BENCH_COLUMNS = schema.names(schema.COMM_BENCH_ROWS)


def write_comm_bench(
    bench_dir: Path, meta: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]
) -> None:
    """Write one comm-bench result: the CSV first, then the JSON that marks it complete."""
    write_bench(bench_dir, COMM_BENCH_JSON, COMM_BENCH_CSV, COMM_BENCH_COLUMNS, meta, rows)


# RESULTS_DIR/input_bench/<bench_id>/: input_bench.json (workload, pipeline, hardware, ...) and
# input_bench.csv, one row per rank count and loader_workers value (`dpsuite input-bench`).
INPUT_BENCH_JSON = "input_bench.json"
INPUT_BENCH_CSV = "input_bench.csv"
INPUT_BENCH_COLUMNS = schema.names(schema.INPUT_BENCH_ROWS)


def write_input_bench(
    bench_dir: Path, meta: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]
) -> None:
    """Write one input-bench result: the CSV first, then the JSON that marks it complete."""
    write_bench(bench_dir, INPUT_BENCH_JSON, INPUT_BENCH_CSV, INPUT_BENCH_COLUMNS, meta, rows)


def write_bench(
    bench_dir: Path,
    json_name: str,
    csv_name: str,
    columns: list[str],
    meta: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]],
) -> None:
    """A benchmark's rows then its metadata; without the JSON no reader takes the CSV."""
    bench_dir = Path(bench_dir)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    try:
        bench_dir.mkdir(parents=True, exist_ok=True)
        replace_atomically(bench_dir / csv_name, text.getvalue().encode())
    except OSError as exc:
        raise ResultsWriteError(bench_dir / csv_name, exc) from None
    try:
        write_json_atomic(bench_dir / json_name, {"schema_version": SCHEMA_VERSION, **meta})
    except ResultsWriteError:
        (bench_dir / csv_name).unlink(missing_ok=True)  # no half of a result stays
        raise


def new_result_dir(root: Path, base: str) -> Path:
    """A new directory ``root/base`` (``-2``, ``-3``, ... when taken), created here so that no
    other writer can take its name."""
    for n in range(1, 10_000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir(parents=True)  # atomic: exactly one writer creates it
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise ResultsWriteError(path, exc) from None
    raise UserError(f"no free result name for {base} in {root}")
