"""What each worker of a scaling run had to compute with, and the series that mixed it.

Scaling efficiency divides the throughput of N workers by N/N0 times that of N0 workers: it
means something only when every worker of every point had the same resources. On a CPU that is
its compute threads (`threads_per_worker`); on a GPU, a GPU of its own (workers that share one
measure the sharing). A 1-worker run with 2 threads against 2 workers with 1 thread each is two
different machines' worth of work per worker, not a scaling curve: the report keeps such points
in separate series and says so (`mixed_series`).
"""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.report.text import plural

UNRECORDED = "threads/worker unrecorded"


def _numbers(runs: pd.DataFrame, column: str) -> pd.Series:
    if column not in runs.columns:
        return pd.Series(float("nan"), index=runs.index)
    return pd.to_numeric(runs[column], errors="coerce")


def threads_per_worker(runs: pd.DataFrame) -> pd.Series:
    """Each run's compute threads per worker: the run's own record, else its fingerprint's."""
    return _numbers(runs, "threads_per_worker").fillna(
        _numbers(runs, "hardware.threads_per_worker")
    )


def resources_per_worker(runs: pd.DataFrame) -> pd.Series:
    """A label per run: '2 threads/worker' on a CPU, '1 GPU/worker' or '2 workers/GPU' on GPUs."""
    threads = threads_per_worker(runs)
    gpus = _numbers(runs, "hardware.accelerator_count")
    per_host = _numbers(runs, "hardware.workers_per_host").fillna(_numbers(runs, "workers"))
    device = runs["device"].astype(str) if "device" in runs.columns else pd.Series("?", runs.index)
    labels = []
    # the values as arrays, run by run: a Series looked up by label per run costs seconds
    columns = (device, threads, gpus, per_host)
    for dev, thread, gpu, host in zip(*(c.to_numpy() for c in columns), strict=True):
        if dev.startswith("cuda"):
            sharing = host / gpu if gpu > 0 else float("nan")
            labels.append(f"{sharing:g} workers/GPU" if sharing > 1 else "1 GPU/worker")
        elif thread >= 1:
            labels.append(f"{plural(int(thread), 'thread')}/worker")
        else:
            labels.append(UNRECORDED)
    return pd.Series(labels, index=runs.index, dtype=object)


def mixed_series(runs: pd.DataFrame, key: list[str]) -> list[tuple[tuple, dict[str, list[int]]]]:
    """The would-be series (runs alike in ``key`` but for workers and ``resources``) whose
    points ran with different resources per worker: each key with the worker counts measured
    under each resource label."""
    out = []
    for values, grp in runs.groupby(key, dropna=False, sort=True):
        if grp["resources"].nunique() < 2:
            continue
        by_resources = {
            label: sorted(int(w) for w in points["workers"].unique())
            for label, points in grp.groupby("resources", sort=True)
        }
        by_resources = dict(sorted(by_resources.items(), key=lambda item: item[1]))
        out.append((values if isinstance(values, tuple) else (values,), by_resources))
    return out


def mixed_finding(label: str, by_resources: dict[str, list[int]]) -> str:
    """Why one would-be series is not compared across its resources, and what is kept."""
    points = "; ".join(
        f"{', '.join(map(str, counts))} {'worker' if counts == [1] else 'workers'}: {resources}"
        for resources, counts in by_resources.items()
    )
    fair = [resources for resources, counts in by_resources.items() if len(counts) > 1]
    kept = (
        f"it is split into fair series, one per resources ({', '.join(fair)})"
        if fair
        else "no two of its worker counts had the same, so no efficiency is given"
    )
    return (
        f"{label}: not one scaling series: its points ran with different resources per worker "
        f"({points}), and efficiency compares only points with the same resources per worker: "
        f"{kept}. Rerun it with one threads_per_worker (one GPU per worker on GPUs)."
    )
