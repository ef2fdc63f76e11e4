"""The lines under a report's title: where the results come from, how many runs, which machines."""

from __future__ import annotations

import numbers
from pathlib import Path

import pandas as pd

from dpsuite.analysis.report import data
from dpsuite.analysis.report.text import plural


def display_path(path: Path) -> str:
    """The path as the user would type it: relative when below the working directory."""
    full = path.resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)


def machines_lines(
    runs: pd.DataFrame, comm: pd.DataFrame, order: list[str] | None = None
) -> list[str]:
    """One line per machine (by name, or in ``order``): what it is, from its fingerprint."""
    frames = [f for f in (runs, comm) if not f.empty and "machine" in f.columns]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    lines = []
    groups = dict(list(rows.groupby("machine", sort=True))) if len(rows) else {}
    for machine in order or list(groups):
        first = groups[machine].iloc[0]

        def get(key: str, row=first):
            value = row.get(f"hardware.{key}")
            return None if value is None or (isinstance(value, float) and pd.isna(value)) else value

        cores = get("cpu_count")
        cores = f"{cores:g}" if isinstance(cores, numbers.Real) else "?"
        parts = [f"{get('cpu') or 'unknown CPU'} ({cores} cores)"]
        accel = get("accelerator")
        if accel and accel != "none":
            parts.append(f"{get('accelerator_count') or '?'} × {accel}")
        for key in ("backend", "torch"):
            if get(key):
                parts.append(f"{key} {get(key)}")
        lines.append(f"Machine `{machine}`: " + ", ".join(parts))
    return lines


def status_line(tree: data.ResultsTree) -> str:
    counts = tree.runs["status"].value_counts() if not tree.runs.empty else pd.Series(dtype=int)
    parts = [f"{n} {s}" for s, n in counts.items()]
    benches = tree.comm["bench_id"].nunique() if not tree.comm.empty else 0
    runs = plural(len(tree.runs), "run") + (f" ({', '.join(parts)})" if parts else "")
    benches = plural(benches, "all-reduce benchmark")
    return f"Results: `{display_path(tree.source)}`: {runs}, {benches}."
