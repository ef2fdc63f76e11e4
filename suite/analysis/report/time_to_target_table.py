"""Time to a target accuracy against worker count: the suite's two halves joined (the MLPerf
and DAWNBench question: how long until the model is good enough?).

With N workers of per-worker batch b, time to target = step time of (workload, N, b) x steps to
the target at global batch N·b, for each LR rule and for the LR oracle (`target_study`). The
step time is measured where this machine's scaling runs have the point (median over the
complete DDP all-reduce runs), and predicted by the scaling model fitted to this machine
(`dpsuite.analysis.scaling`) elsewhere. Per-worker batches are those the scaling runs measured,
so the model only ever extrapolates in worker count. Training steps only: evaluations and
start-up are not counted.

Each point says where its step time comes from (``source``): ``measured`` (runs with no more
worker threads than cores), ``oversubscribed`` (measured, but under contention: kept apart, never
counted as measured) or ``model``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpsuite.analysis import scaling

ORACLE = "oracle"  # the curve of the best LR per batch
MEASURED, OVERSUBSCRIBED, MODEL = "measured", "oversubscribed", "model"  # a step time's source
COLUMNS = [
    "curve",
    "workers",
    "per_worker_batch",
    "global_batch",
    "steps",
    "step_time_s",
    "time_s",
    "measured",
    "extrapolated",
    "oversubscribed",
    "source",
]


def measured_steps(runs: pd.DataFrame, machine: str, workload: str) -> pd.DataFrame:
    """Median step time per (workers, per_worker_batch) of one machine's and workload's
    complete DDP all-reduce runs, with whether any of them was oversubscribed."""
    ok = runs[
        (runs["machine"] == machine)
        & (runs["workload"] == workload)
        & (runs["mode"] == "ddp")
        & (runs["status"] == "complete")
        & (runs["sync"] == "allreduce")
        & (runs["step_time_s"] > 0)
    ]
    if ok.empty:
        return pd.DataFrame(
            columns=["workers", "per_worker_batch", "step_time_s", "oversubscribed"]
        )
    points = ok.groupby(["workers", "per_worker_batch"])
    return (
        points["step_time_s"]
        .median()
        .to_frame()
        .join(points["oversubscribed"].any())
        .reset_index()
        .astype({"workers": int, "per_worker_batch": int})
    )


def model_for(fits: list[scaling.Fit], machine: str, workload: str) -> scaling.ScalingModel | None:
    return next((f.model for f in fits if f.hardware == machine and f.workload == workload), None)


def step_time_table(
    measured: pd.DataFrame, model: scaling.ScalingModel | None, batches: list[int]
) -> pd.DataFrame:
    """Step time of every (N, b) with b a measured per-worker batch and N·b a global batch of
    the study: measured where the point was run, else from the model (when there is one)."""
    rows = []
    for b in sorted(measured["per_worker_batch"].unique()):
        for batch in batches:
            if batch % b:
                continue
            n = batch // b
            at = measured[(measured["workers"] == n) & (measured["per_worker_batch"] == b)]
            if len(at):
                step, over, known = (
                    float(at["step_time_s"].iloc[0]),
                    bool(at["oversubscribed"].iloc[0]),
                    True,
                )
            elif model is not None:
                step, over, known = model.step_s(n, int(b)), False, False
            else:
                continue
            rows.append(
                {
                    "workers": n,
                    "per_worker_batch": int(b),
                    "global_batch": batch,
                    "step_time_s": step,
                    "measured": known,
                    "extrapolated": not known and model is not None and n > model.validated_max,
                    "oversubscribed": over,
                    "source": (OVERSUBSCRIBED if over else MEASURED) if known else MODEL,
                }
            )
    return pd.DataFrame(rows)


def time_table(steps: pd.DataFrame, step_times: pd.DataFrame) -> pd.DataFrame:
    """Per curve (``ORACLE`` and each rule) and (N, b): steps to target x step time. ``steps``
    has curve, global_batch, steps (inf: never reached; those points are left out)."""
    if steps.empty or step_times.empty:
        return pd.DataFrame(columns=COLUMNS)
    joined = steps.merge(step_times, on="global_batch")
    joined = joined[np.isfinite(joined["steps"])]
    return joined.assign(time_s=joined["steps"] * joined["step_time_s"])[COLUMNS].reset_index(
        drop=True
    )


def fastest_per_workers(times: pd.DataFrame) -> pd.DataFrame:
    """Per curve and worker count, the per-worker batch that reaches the target soonest."""
    if times.empty:
        return times
    best = times.loc[times.groupby(["curve", "workers"])["time_s"].idxmin()]
    return best.sort_values(["curve", "workers"]).reset_index(drop=True)


@dataclass(frozen=True)
class Fastest:
    """The quickest way to the target along one curve, measured and predicted."""

    measured: pd.Series | None  # the row (see COLUMNS) of the fastest measured point
    predicted: pd.Series | None  # ... of the fastest point from the model, when faster


def fastest(times: pd.DataFrame, curve: str) -> Fastest:
    """Measured: the fastest point measured without oversubscription; predicted: the model's,
    when faster (oversubscribed points are neither)."""
    rows = times[times["curve"] == curve]
    known, model = rows[rows["source"] == MEASURED], rows[rows["source"] == MODEL]
    best_known = known.loc[known["time_s"].idxmin()] if len(known) else None
    best_model = model.loc[model["time_s"].idxmin()] if len(model) else None
    slower = best_known is not None and best_model is not None
    if slower and best_model["time_s"] >= best_known["time_s"]:
        best_model = None
    return Fastest(best_known, best_model)
