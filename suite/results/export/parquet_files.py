"""`dpsuite export parquet`: runs, evaluations, steps and comm-bench results as Parquet files.

Written beside the results: ``runs.parquet`` (``suite.results.load``: one row per run),
``epochs.parquet`` and ``steps.parquet`` (every run's epochs.csv and steps.csv, with ``run_id``
and ``group``), ``comm_bench.parquet`` (``suite.results.load_comm_bench``). Columns that mix
types (a list in one run, a number in another) are written as JSON text.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from suite.errors import UserError
from suite.results import owned
from suite.results.export.tree import ExportRun, require
from suite.results.load import load
from suite.results.store import load_comm_bench

# pandas' inferred kinds that Parquet stores as they are; anything else becomes JSON text
PLAIN_KINDS = {"string", "empty", "boolean", "integer", "floating", "mixed-integer-float"}


def per_run_rows(runs: list[ExportRun], which: str) -> pd.DataFrame:
    """Every run's epochs or steps, one frame, each row with its run_id and group."""
    frames = [
        getattr(run, which).assign(run_id=run.run_id, group=run.group)
        for run in runs
        if not getattr(run, which).empty
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


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


def write_frame(frame: pd.DataFrame, path: Path) -> None:
    """Write atomically: readers see the previous file or the new one, never a torn one (and a
    full disk is one line)."""
    buffer = io.BytesIO()
    parquet_safe(frame).to_parquet(buffer, engine="pyarrow", index=False)
    owned.write(path, buffer.getvalue())


def export_parquet(root: Path, runs: list[ExportRun]) -> list[Path]:
    """Write the Parquet files that have rows; returns their paths."""
    require("pyarrow", "parquet", "parquet")
    frames = {
        "runs": load(root),
        "epochs": per_run_rows(runs, "epochs"),
        "steps": per_run_rows(runs, "steps"),
        "comm_bench": load_comm_bench(root),
    }
    if all(frame.empty for frame in frames.values()):
        raise UserError(f"no runs to export in {root} (no run.json or comm_bench.json below it)")
    written = []
    for name, frame in frames.items():
        if not frame.empty:
            write_frame(frame, root / f"{name}.parquet")
            written.append(root / f"{name}.parquet")
    return written
