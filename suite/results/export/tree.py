"""A results tree as the exporters see it: one record per run, grouped by sweep."""

from __future__ import annotations

import importlib
import json
import math
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from dpsuite.errors import UserError
from dpsuite.results.load import epochs_of, steps_of, trusted_runs
from dpsuite.results.run_csvs import Read
from dpsuite.results.store import effective_status


@dataclass
class ExportRun:
    """One run: its record, where it sits in the tree and its per-evaluation and per-step rows."""

    run_id: str
    group: str  # the sweep: the run directory's parent, relative to the exported tree
    run_dir: Path
    record: dict[str, Any]
    epochs_read: Read  # its epochs.csv as read with every run's (frame and warnings)
    steps_read: Read

    @property
    def epochs(self) -> pd.DataFrame:
        return self.epochs_read.frame

    @property
    def steps(self) -> pd.DataFrame:
        return self.steps_read.frame

    @property
    def config(self) -> dict[str, Any]:
        return self.record.get("config") or {}

    @property
    def hardware(self) -> dict[str, Any]:
        return self.record.get("hardware") or {}

    @property
    def status(self) -> str:
        return effective_status(self.record)

    @property
    def started(self) -> float | None:
        """Start of the run in seconds since the epoch (None when not recorded)."""
        return self._time("started_at")

    @property
    def finished(self) -> float | None:
        """End of the run in seconds since the epoch (None when not recorded)."""
        return self._time("finished_at")

    def _time(self, key: str) -> float | None:
        try:
            return datetime.fromisoformat(self.record[key]).timestamp()
        except (KeyError, TypeError, ValueError):
            return None

    def scalar_metrics(self) -> dict[str, float]:
        """The run's numeric summary metrics (``metrics`` in run.json), finite ones only."""
        metrics = self.record.get("metrics") or {}
        return {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }


def require(package: str, extra: str, command: str) -> Any:
    """Import an optional package, or fail with one line naming the extra that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise UserError(
            f"dpsuite export {command} needs the {package} package: "
            f"pip install 'dpsuite[{extra}]' (in a clone: pip install -e '.[{extra}]')"
        ) from None


def check_results_dir(path: str | Path) -> Path:
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"results directory not found: {root}")
    return root


def group_of(run_dir: Path, root: Path) -> str:
    parent = run_dir.parent.relative_to(root)
    return parent.as_posix() if parent.parts else root.resolve().name


def read_runs(root: Path) -> list[ExportRun]:
    """Every run below ``root`` that the loader trusts; a damaged, copied or edited run.json is
    skipped with a warning naming it, as ``dpsuite.results.load`` does."""
    trusted = list(trusted_runs(root))
    dirs = [run_dir for run_dir, _ in trusted]
    runs = []
    reads = zip(trusted, epochs_of(dirs), steps_of(dirs), strict=True)
    for (run_dir, record), epochs, steps in reads:
        for note in [*epochs.notes, *steps.notes]:
            warnings.warn(note, stacklevel=2)
        runs.append(
            ExportRun(
                run_id=str(record["run_id"]),
                group=group_of(run_dir, root),
                run_dir=run_dir,
                record=record,
                epochs_read=epochs,
                steps_read=steps,
            )
        )
    return runs


def require_runs(runs: list[ExportRun], root: Path) -> None:
    if not runs:
        raise UserError(f"no runs to export in {root} (no readable run.json below it)")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists as JSON text, so every value is one scalar."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, (list, tuple)):
        value = json.dumps(value)
    return {prefix.rstrip("."): value}
