"""No two Parquet exports over the same runs where one glob would read both.

``read_parquet('results/**/runs.parquet')`` (DuckDB, pyarrow.dataset, Spark) reads every export
below ``results``: had a sweep been exported on its own and then the whole tree, each of the
sweep's runs would be counted twice. So an export is refused, before anything is written, when
an export file holding any of its runs (or comm-bench results) lies below the exported tree or
the output directory, or in a directory above either. The files an export replaces (the output
directory's own) do not count. The one line names the file to remove.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from dpsuite.errors import UserError

EXPORT_FILES = ("runs.parquet", "epochs.parquet", "steps.parquet", "comm_bench.parquet")
ID_COLUMNS = ("run_id", "bench_id")


def refuse_overlap(root: Path, out: Path, ids: set[str]) -> None:
    """Raise UserError naming an earlier export that holds any of ``ids``."""
    own = {(out / name).resolve() for name in EXPORT_FILES}
    seen: set[Path] = set()
    for path in (*exports_below(root), *exports_below(out), *exports_above(root, out)):
        path = path.resolve()
        if path in own or path in seen:
            continue
        seen.add(path)
        shared = ids & ids_in(path)
        if shared:
            raise UserError(
                f"{path} is an earlier export of {len(shared)} of these runs: a glob over both "
                "would count them twice; remove it first (one export per tree, at its root)"
            )


def exports_below(directory: Path) -> Iterator[Path]:
    """Export files at any depth below ``directory`` (links to directories not followed)."""
    for folder, _, files in os.walk(directory, followlinks=False):
        for name in EXPORT_FILES:
            if name in files:
                yield Path(folder) / name


def exports_above(*directories: Path) -> Iterator[Path]:
    """Export files in every directory above those given."""
    for directory in directories:
        for parent in directory.resolve().parents:
            for name in EXPORT_FILES:
                if (parent / name).is_file():
                    yield parent / name


def ids_in(path: Path) -> set[str]:
    """The run and bench ids a Parquet file holds; none when it is not an export one can read."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        columns = [c for c in ID_COLUMNS if c in names]
        table = pq.read_table(path, columns=columns) if columns else None
    except (OSError, ValueError):
        return set()
    if table is None:
        return set()
    return {str(v) for c in columns for v in table.column(c).to_pylist() if v is not None}
