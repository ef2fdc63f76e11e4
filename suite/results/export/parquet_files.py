"""`dpsuite export parquet`: runs, evaluations, steps and comm-bench results as Parquet files.

Written into one directory (the results tree's root, or ``--out``): ``runs.parquet``
(``dpsuite.results.load``: one row per run), ``epochs.parquet`` and ``steps.parquet`` (every
run's epochs.csv and steps.csv, with ``run_id`` and ``group``), ``comm_bench.parquet``
(``dpsuite.results.load_comm_bench``). Nested names are joined with ``__`` instead of dots
(``config__workload__name``), so SQL needs no quoting. Columns that mix types (a list in one
run, a number in another) are written as JSON text. Every column the results schema describes
carries its unit and meaning as Arrow field metadata. An export never overlaps another one:
see ``parquet_overlap``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpsuite.errors import UserError
from dpsuite.results import owned, schema
from dpsuite.results.export.parquet_overlap import refuse_overlap
from dpsuite.results.export.tree import ExportRun, require
from dpsuite.results.load import described, load_comm_bench, runs_frame
from dpsuite.results.run_csvs import joint_rows, repeated

# pandas' inferred kinds that Parquet stores as they are; anything else becomes JSON text
PLAIN_KINDS = {"string", "empty", "boolean", "integer", "floating", "mixed-integer-float"}


def per_run_rows(runs: list[ExportRun], which: str) -> pd.DataFrame:
    """Every run's epochs or steps, one frame, each row with its run_id and group."""
    reads = [getattr(run, f"{which}_read") for run in runs]
    kept = [(run, read) for run, read in zip(runs, reads, strict=True) if not read.empty]
    if not kept:
        return pd.DataFrame()
    # the rows as parsed together, when they were: never cut into runs to be joined again
    frame = joint_rows(reads)
    if frame is None:
        frame = joined([read.frame for _, read in kept])
    # labelled once, not run by run: over thousands of runs each column set costs more
    lengths = [read.rows for _, read in kept]
    for name in ("run_id", "group"):
        frame[name] = repeated([getattr(run, name) for run, _ in kept], lengths)
    return frame


def joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat(frames, ignore_index=True)``; column by column with numpy where every frame
    has the same columns of one numeric type each (thousands of small frames: what the runs'
    CSVs read as), which is several times faster."""
    columns = list(frames[0].columns)
    if all(list(f.columns) == columns for f in frames):
        arrays = {c: [f[c].to_numpy() for f in frames] for c in columns}
        if all(
            len({a.dtype for a in parts}) == 1 and parts[0].dtype.kind in "iufb"
            for parts in arrays.values()
        ):
            return pd.DataFrame({c: np.concatenate(parts) for c, parts in arrays.items()})
    return pd.concat(frames, ignore_index=True)


def parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns Parquet cannot type (lists, dicts, mixed values) as JSON text."""
    frame = frame.copy()
    for column in frame.columns:
        kind = pd.api.types.infer_dtype(frame[column], skipna=True)
        if pd.api.types.is_object_dtype(frame[column]) and kind not in PLAIN_KINDS:
            frame[column] = frame[column].map(
                lambda v: None if v is None else json.dumps(v, default=str)
            )
    return frame


SQL_SEPARATOR = "__"  # what a dot of a nested name becomes in an exported column


def sql_name(column: Any) -> str:
    """``config.workload.name`` as ``config__workload__name``: a name SQL takes unquoted."""
    return str(column).replace(".", SQL_SEPARATOR)


def described_table(
    frame: pd.DataFrame, fields: tuple[schema.Field, ...] = (), rename: Any = None
) -> Any:
    """The frame as an Arrow table whose columns carry their unit and meaning (field metadata
    ``unit``, ``meaning``: from ``fields``, else from the schema's run columns), and whose
    pandas attrs (``units``, ``meanings``, restored by ``pd.read_parquet``) hold the same.
    ``rename`` (a function of a column name) renames the columns once they are described."""
    import pyarrow as pa

    by_name = {f.name: f for f in fields}
    known = {c: by_name.get(c) or schema.lookup(str(c)) for c in frame.columns}
    known = {c: f for c, f in known.items() if f is not None}
    if rename is not None:
        frame = frame.rename(columns=rename)
        known = {rename(c): f for c, f in known.items()}
    table = pa.Table.from_pandas(parquet_safe(frame), preserve_index=False)
    columns = [
        field.with_metadata({"unit": known[field.name].unit, "meaning": known[field.name].meaning})
        if field.name in known
        else field
        for field in table.schema
    ]
    attrs = {
        "units": {c: f.unit for c, f in known.items() if f.unit},
        "meanings": {c: f.meaning for c, f in known.items()},
    }
    metadata = {**(table.schema.metadata or {}), b"PANDAS_ATTRS": json.dumps(attrs).encode()}
    return table.cast(pa.schema(columns, metadata=metadata))


def write_frame(
    frame: pd.DataFrame, path: Path, fields: tuple[schema.Field, ...] = (), rename: Any = None
) -> None:
    """Write atomically (readers see the previous file or the new one, never a torn one, and a
    full disk is one line), with each column's unit and meaning (see ``described_table``)."""
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(described_table(frame, fields, rename), buffer)
    owned.write(path, buffer.getvalue())


def export_parquet(root: Path, runs: list[ExportRun], out: Path | None = None) -> list[Path]:
    """Write the Parquet files that have rows into ``out`` (default: ``root``); returns their
    paths. Refused, before anything is written, when it would overlap another export."""
    require("pyarrow", "parquet", "parquet")
    out = root if out is None else out
    frames = {
        # the records read_runs already took through the gate: load(root) would read them again
        "runs": described(runs_frame((run.run_dir, run.record) for run in runs)),
        "epochs": per_run_rows(runs, "epochs"),
        "steps": per_run_rows(runs, "steps"),
        "comm_bench": load_comm_bench(root),
    }
    if all(frame.empty for frame in frames.values()):
        raise UserError(f"no runs to export in {root} (no run.json or comm_bench.json below it)")
    fields = {
        "epochs": schema.EPOCHS,
        "steps": schema.STEPS,
        "comm_bench": (*schema.COMM_BENCH_ROWS, *schema.COMM_BENCH_META),
    }
    refuse_overlap(root, out, run_ids(frames))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise owned.OutputWriteError(out, exc) from None
    written = []
    for name, frame in frames.items():
        if not frame.empty:
            write_frame(frame, out / f"{name}.parquet", fields.get(name, ()), sql_name)
            written.append(out / f"{name}.parquet")
    return written


def run_ids(frames: dict[str, pd.DataFrame]) -> set[str]:
    """The run ids (and comm-bench result ids) this export writes."""
    ids: set[str] = set()
    for frame in frames.values():
        for column in ("run_id", "bench_id"):
            if column in frame.columns:
                ids.update(frame[column].dropna().astype(str))
    return ids
