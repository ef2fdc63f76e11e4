"""Read results trees into pandas: one row per run, and the runs' epochs and steps.

``load(path)`` gives one row per run: the run.json keys, the metrics (the gradient noise scale
as ``grad_noise_scale.*``), the fingerprint as ``hardware.*`` and the composed config as
``config.*`` (dotted, e.g. ``config.workload.num_samples``), every name as in
``dpsuite.results.schema``. ``load_epochs(path)`` and ``load_steps(path)`` give every run's rows
below ``path`` with its ``run_id``.

Every reader takes its runs from ``dpsuite.results.gate``: a run.json is trusted only when its keys,
types, values and status are the schema's, it is where its run id says (its directory's name),
once, and its config still hashes to its run id. Anything else (a copy under another name, a
hand-edited file, a damaged one) is left out with a warning naming the file and the field.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dpsuite.results import schema
from dpsuite.results.gate import (
    check_comm_meta,
    check_comm_rows,
    check_input_meta,
    check_rows,
    is_regular,
    trusted_runs,
    walk_files,
)
from dpsuite.results.run_csvs import Read, read_many
from dpsuite.results.store import (
    COMM_BENCH_CSV,
    COMM_BENCH_JSON,
    EPOCH_COLUMNS,
    INPUT_BENCH_CSV,
    INPUT_BENCH_JSON,
    RANK_STEP_COLUMNS,
    RANK_STEPS_CSV,
    STEP_COLUMNS,
    effective_status,
    read_json,
)

METRIC_MAPPINGS = {f.name: f.fields for f in schema.METRICS if f.fields}


# What JSON's leaves arrive as: never a mapping (tested first, as most values are these).
SCALARS = frozenset({str, int, float, bool, type(None)})


def _dotted(prefix: str, value: Any, row: dict[str, Any]) -> None:
    """Flatten nested mappings into ``prefix.key`` columns; lists are left to run.json."""
    for key, item in value.items():
        kind = type(item)
        if kind is dict or (kind not in SCALARS and isinstance(item, Mapping)):
            _dotted(f"{prefix}.{key}", item, row)
        elif kind is not list:
            row[f"{prefix}.{key}"] = item


def _leaf(value: Any) -> bool:
    """Neither a mapping nor a list: a value that is a column of its own."""
    kind = type(value)
    return kind in SCALARS or not isinstance(value, (Mapping, list))


def flatten(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One row of ``load``'s frame from a run.json record."""
    row: dict[str, Any] = {}
    for key, value in rec.items():
        if key == "metrics" and isinstance(value, Mapping):
            for name, item in value.items():
                if name in METRIC_MAPPINGS:  # always its sub-columns, empty when not measured
                    for sub in METRIC_MAPPINGS[name]:
                        row[f"{name}.{sub.name}"] = (item or {}).get(sub.name)
                elif _leaf(item):
                    row[name] = item
        elif key in ("hardware", "config") and isinstance(value or {}, Mapping):
            _dotted(key, value or {}, row)
        elif _leaf(value):
            row[key] = value
    return row


def find_runs(path: str | Path) -> list[Path]:
    """Every run directory (one holding run.json) below ``path``, sorted; hidden directories
    (attempts in progress, Hydra's and the suite's own files) are not results, and a directory
    that cannot be read is a warning."""
    return [file.parent for file in walk_files(Path(path), "run.json")]


def load(path: str | Path, include_incomplete: bool = True) -> pd.DataFrame:
    """Read a results tree into one flat frame, one row per run (see the module docstring).

    Runs left 'running' by a dead process read as 'failed'. With ``include_incomplete=False``
    only complete and diverged runs are returned.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"results directory not found: {root}")
    frame = runs_frame(trusted_runs(root))
    if not include_incomplete and not frame.empty:
        frame = frame[frame["status"].isin(["complete", "diverged"])].reset_index(drop=True)
    return described(frame)


def runs_frame(trusted: Iterable[tuple[Path, Mapping[str, Any]]]) -> pd.DataFrame:
    """One row per (run directory, run.json) as ``load`` gives them, before ``described``."""
    rows = []
    for run_dir, rec in trusted:
        row = flatten(rec)
        row["status"] = effective_status(rec)
        row["run_dir"] = str(run_dir)
        rows.append(row)
    return pd.DataFrame(rows)


def described(frame: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as UTC datetimes, and each column's unit and meaning in ``frame.attrs``
    (``attrs["units"]["step_time_s"] == "s"``), as ``dpsuite.results.schema`` defines them."""
    for column in schema.TIMESTAMP_COLUMNS:
        if column in frame.columns:
            frame[column] = pd.to_datetime(
                frame[column], utc=True, errors="coerce", format="ISO8601"
            )
    frame.attrs.update(schema.column_units(frame.columns))
    return frame


def _run_dirs(path: Path, name: str) -> list[Path]:
    """The directory itself when it is one run's, else the runs the gate trusts below it."""
    if (path / "run.json").exists() or (path / name).exists():
        return [path]
    return [run_dir for run_dir, _ in trusted_runs(path)]


def _per_run(path: str | Path, name: str, columns: list[str], optional=()) -> pd.DataFrame:
    """One CSV of one run directory, or of every run below ``path``, with a run_id column."""
    dirs = _run_dirs(Path(path), name)
    frames = [
        frame.assign(run_id=run_dir.name)
        for run_dir, frame in zip(dirs, read_runs_csv(dirs, name, columns, optional), strict=True)
    ]
    if not frames:
        return pd.DataFrame(columns=[*columns, "run_id"])
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def read_runs_csv(
    dirs: list[Path], name: str, columns: list[str], optional=()
) -> list[pd.DataFrame]:
    """``name`` of each run directory, read in one parse; each file's warnings as its own."""
    reads = read_many([run_dir / name for run_dir in dirs], columns, list(optional))
    for read in reads:
        for note in read.notes:
            warnings.warn(note, stacklevel=3)
    return [read.frame for read in reads]


def epochs_of(dirs: list[Path], labels: Mapping[str, list[str]] | None = None) -> list[Read]:
    """Each run directory's epochs.csv (frame and warnings), in one parse; ``labels`` as
    ``run_csvs.read_many`` adds them."""
    files = [run_dir / "epochs.csv" for run_dir in dirs]
    return read_many(files, EPOCH_COLUMNS, schema.OPTIONAL_EPOCH_COLUMNS, labels)


def steps_of(dirs: list[Path], labels: Mapping[str, list[str]] | None = None) -> list[Read]:
    """Each run directory's steps.csv (frame and warnings), in one parse; ``labels`` as
    ``run_csvs.read_many`` adds them."""
    files = [run_dir / "steps.csv" for run_dir in dirs]
    return read_many(files, STEP_COLUMNS, schema.OPTIONAL_STEP_COLUMNS, labels)


def rank_steps_of(dirs: list[Path]) -> dict[Path, Read]:
    """Each run directory's steps_by_rank.csv (each rank's own step times), in one parse; runs
    without one (one rank, or written before it was recorded) are left out."""
    files = [d / RANK_STEPS_CSV for d in dirs if (d / RANK_STEPS_CSV).is_file()]
    reads = read_many(files, RANK_STEP_COLUMNS)
    return {file.parent: read for file, read in zip(files, reads, strict=True)}


def load_epochs(path: str | Path) -> pd.DataFrame:
    """epochs.csv of one run directory, or of every run below ``path`` (run_id column)."""
    return _per_run(path, "epochs.csv", EPOCH_COLUMNS, schema.OPTIONAL_EPOCH_COLUMNS)


def load_steps(path: str | Path) -> pd.DataFrame:
    """steps.csv of one run directory, or of every run below ``path`` (run_id column)."""
    return _per_run(path, "steps.csv", STEP_COLUMNS, schema.OPTIONAL_STEP_COLUMNS)


def load_comm_bench(path: str | Path) -> pd.DataFrame:
    """Every comm-bench result below ``path``: one row per (bench, collective, message size).

    Columns: the CSV's, plus ``bench_id, world_size, backend, bench_dir`` and ``hardware.*``.
    Results written before other collectives were measured read as ``all_reduce``. Unreadable
    files are skipped with a warning naming the file.
    """
    frames = []
    for meta_file in walk_files(Path(path), COMM_BENCH_JSON):
        csv_file = meta_file.parent / COMM_BENCH_CSV
        try:
            if not (is_regular(meta_file) and is_regular(csv_file)):
                raise ValueError("not a regular file")
            meta = read_json(meta_file)
            check_comm_meta(meta)
            frame = pd.read_csv(csv_file)
            if "collective" not in frame.columns:
                frame.insert(0, "collective", None)
            # object first: a column of empty cells reads as float, which takes no name
            frame["collective"] = (
                frame["collective"].astype(object).fillna(meta.get("op", "all_reduce"))
            )
            check_comm_rows(frame)
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            warnings.warn(
                f"skipping unreadable comm-bench result {meta_file.parent}: {exc}", stacklevel=2
            )
            continue
        frame["bench_id"] = meta.get("bench_id", meta_file.parent.name)
        frame["world_size"] = meta.get("world_size")
        frame["backend"] = meta.get("backend")
        frame["bench_dir"] = str(meta_file.parent)
        for key, value in (meta.get("hardware") or {}).items():
            frame[f"hardware.{key}"] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_input_bench(path: str | Path) -> pd.DataFrame:
    """Every input-bench result below ``path``: one row per (bench, ranks, loader_workers).

    Columns: the CSV's, plus ``bench_id, workload, pipeline, device, bench_dir`` and
    ``hardware.*``. Unreadable results are skipped with a warning naming the directory.
    """
    frames = []
    for meta_file in walk_files(Path(path), INPUT_BENCH_JSON):
        csv_file = meta_file.parent / INPUT_BENCH_CSV
        try:
            if not (is_regular(meta_file) and is_regular(csv_file)):
                raise ValueError("not a regular file")
            meta = read_json(meta_file)
            check_input_meta(meta)
            frame = pd.read_csv(csv_file)
            check_rows(frame, schema.INPUT_BENCH_ROWS)
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            warnings.warn(
                f"skipping unreadable input-bench result {meta_file.parent}: {exc}", stacklevel=2
            )
            continue
        frame["bench_id"] = meta.get("bench_id", meta_file.parent.name)
        for key in ("workload", "pipeline", "device"):
            frame[key] = meta.get(key)
        frame["bench_dir"] = str(meta_file.parent)
        for key, value in (meta.get("hardware") or {}).items():
            frame[f"hardware.{key}"] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
