"""What runs measured, as a run's end line and the table a sweep ends with (from run.json).

Read from the runs' own records, never from progress events (which a stopped or busy terminal
may have missed). Accuracy is shown only where it means something: not on random inputs
(``synthetic_data``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Config keys that do not make two runs different settings for the efficiency's baseline:
# the worker count itself, how its cores are shared, where results go, and the repeat (a
# repeated measurement of the same config).
NOT_SETTINGS = (
    "workers",
    "threads_per_worker",
    "results_dir",
    "force",
    "cache_dir",
    "ddp.start_method",
    "ddp.timeout_s",
    "repeat",
)
# Run keys the table shows as columns when the sweep's runs differ in them (header, key).
SETTING_COLUMNS = (
    ("mode", "mode"),
    ("batch/worker", "per_worker_batch"),
    ("sync", "sync_label"),
    ("lr_rule", "lr_rule"),
    ("precision", "precision"),
    ("seed", "seed"),
)


def _number(x: Any) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def metrics_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The record's metrics; none where a damaged record holds something else."""
    metrics = record.get("metrics")
    return metrics if isinstance(metrics, Mapping) else {}


def rate(x: float) -> str:
    """A rate with three significant digits, thousands separated: 57,600 or 12.3."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def duration(seconds: float) -> str:
    """A step's time in ms below a second, else in s (three significant digits)."""
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def accuracy(record: Mapping[str, Any]) -> float | None:
    """The run's final eval accuracy, or None where there is none or it means nothing."""
    if record.get("synthetic_data"):
        return None
    return _number(metrics_of(record).get("final_eval_acc"))


def final_detail(record: Mapping[str, Any], job_id: str | None = None) -> str:
    """What a finished run's line says: its throughput, median step (and outlier steps),
    accuracy where meaningful, its job, why it failed."""
    metrics = metrics_of(record)
    parts = []
    if (samples := _number(metrics.get("samples_per_s"))) is not None:
        parts.append(f"{rate(samples)} samples/s")
    if (step := _number(metrics.get("step_time_s"))) is not None:
        parts.append(f"median step {duration(step)}")
    if outliers := _number(metrics.get("outlier_steps")):
        parts.append(f"{outliers:.0f} outlier step{'s' if outliers > 1 else ''}")
    if (acc := accuracy(record)) is not None:
        parts.append(f"eval_acc {100 * acc:.2f}%")
    if job_id is not None:
        parts.append(f"(job {job_id})")
    detail = "  ".join(parts)
    if record.get("status") == "failed" and record.get("error"):
        detail += f": {record['error']}"
    return detail.strip()


def settings_key(record: Mapping[str, Any]) -> str:
    """The run's settings but its worker count and repeat: runs with equal keys differ only in
    workers, or are repeated measurements of one config."""

    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, dict):
            return {prefix.rstrip("."): d}
        return {k: v for key, sub in d.items() for k, v in flat(sub, f"{prefix}{key}.").items()}

    config = flat(record.get("config") or {})
    kept = {k: v for k, v in config.items() if not k.startswith(NOT_SETTINGS)}
    return json.dumps(kept, sort_keys=True, default=str)


@dataclass
class Row:
    """The runs of one setting at one worker count (repeats of one config): their medians."""

    runs: list[Mapping[str, Any]]

    def median(self, values: Iterable[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    @property
    def samples_per_s(self) -> float | None:
        return self.median(_number(metrics_of(r).get("samples_per_s")) for r in self.runs)

    @property
    def step_time_s(self) -> float | None:
        return self.median(_number(metrics_of(r).get("step_time_s")) for r in self.runs)

    @property
    def accuracy(self) -> float | None:
        return self.median(accuracy(r) for r in self.runs)

    @property
    def workers(self) -> int:
        return int(_number(self.runs[0].get("workers")) or 0)


def rows(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], Row]:
    """The records that measured a throughput, by settings and worker count."""
    out: dict[tuple[str, int], Row] = {}
    for r in records:
        if _number(metrics_of(r).get("samples_per_s")) and _number(r.get("workers")):
            key = (settings_key(r), int(r["workers"]))
            out.setdefault(key, Row([])).runs.append(r)
    return out


def efficiency(row: Row, base: Row | None) -> float | None:
    """samples/s over N x the 1-worker samples/s of the same settings (None without one)."""
    if base is None or not base.samples_per_s or row.samples_per_s is None:
        return None
    return row.samples_per_s / (row.workers * base.samples_per_s)


def _order(value: Any) -> tuple[int, float, str]:
    """Sorts numbers as numbers, before text."""
    number = _number(value)
    return (0, number, "") if number is not None else (1, 0.0, str(value))


def sweep_table(records: Iterable[Mapping[str, Any]]) -> str:
    """What the runs measured, one line per workload, setting and worker count (repeats: their
    median), as aligned columns: workload, the settings the runs differ in, workers, samples/s,
    median step, efficiency against the 1-worker run of the same settings, and accuracy where
    any run has a meaningful one. Empty when no run measured a throughput."""
    by_key = rows(records)
    if not by_key:
        return ""
    firsts = [row.runs[0] for row in by_key.values()]
    varying = [(h, k) for h, k in SETTING_COLUMNS if len({str(r.get(k)) for r in firsts}) > 1]
    repeated = any(len(row.runs) > 1 for row in by_key.values())
    with_acc = any(row.accuracy is not None for row in by_key.values())
    header = ["workload", *(h for h, _ in varying), "workers"]
    header += [*(["runs"] if repeated else []), "samples/s", "median step", "efficiency"]
    table = [header + (["eval_acc"] if with_acc else [])]

    def order(item: tuple[tuple[str, int], Row]) -> tuple:
        first = item[1].runs[0]
        return (str(first.get("workload")), *(_order(first.get(k)) for _, k in varying), item[0])

    for (key, _), row in sorted(by_key.items(), key=order):
        first, step = row.runs[0], row.step_time_s
        eff = efficiency(row, by_key.get((key, 1)))
        line = [str(first.get("workload")), *(str(first.get(k)) for _, k in varying)]
        line += [str(row.workers), *([str(len(row.runs))] if repeated else [])]
        line += [rate(row.samples_per_s or 0.0), duration(step) if step is not None else "-"]
        line.append(f"{100 * eff:.0f}%" if eff is not None else "-")
        if with_acc:
            line.append(f"{100 * row.accuracy:.2f}%" if row.accuracy is not None else "-")
        table.append(line)
    return aligned(table, left=1 + len(varying))


def aligned(rows: list[list[str]], left: int) -> str:
    """Rows as columns two spaces apart: the first ``left`` columns left-aligned, the numbers
    right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(w) if i < left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
