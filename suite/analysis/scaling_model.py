"""A scaling model of data-parallel training, fitted to measurements, then extrapolated.

Per hardware (tag, or fingerprint when untagged) and workload:

* all-reduce: ring alpha-beta model ``t(S, N) = 2(N-1)*alpha + 2(N-1)/N * S * beta``, fitted
  to comm-bench results (relative least squares over message sizes); DDP sends the gradient in
  ``ceil(S / bucket)`` buckets, each paying the latency term;
* compute: step time of ``workers=1`` runs, linear in the per-worker batch;
* overlap: the fraction of all-reduce time hidden behind backward, ``1 - exposed/comm``, from
  runs that measured both.

step(N, b) = compute(b) + (1 - overlap) * allreduce(S, N); throughput = N*b / step(N, b).
A hand-written hardware profile (accelerator TFLOP/s, link bandwidth and latency) can stand in
for measurements, to ask what a cluster you do not have would do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

BYTES_PER_PARAM = {"fp32": 4, "fp64": 8, "bf16": 4, "fp16": 4}  # DDP all-reduces fp32 grads in AMP


@dataclass(frozen=True)
class CommModel:
    """Ring all-reduce cost: latency per message-hop ``alpha`` (s), time per byte ``beta`` (s/B)."""

    alpha_s: float
    beta_s_per_byte: float

    def allreduce_s(self, size_bytes: float, n: int, messages: int = 1) -> float:
        if n <= 1:
            return 0.0
        return (
            messages * 2 * (n - 1) * self.alpha_s
            + 2 * (n - 1) / n * size_bytes * self.beta_s_per_byte
        )


def fit_comm_model(bench: pd.DataFrame) -> CommModel:
    """Fit alpha and beta to one machine's comm-bench rows (time_us per size_bytes)."""
    rows = bench[(bench["errors"] == 0) & (bench["world_size"] > 1)]
    if rows.empty:
        raise ValueError("no error-free multi-rank comm-bench rows to fit")
    n = rows["world_size"].to_numpy(float)
    t = rows["time_us"].to_numpy(float) * 1e-6
    design = np.column_stack([2 * (n - 1), 2 * (n - 1) / n * rows["size_bytes"].to_numpy(float)])
    # Relative least squares: small messages (latency) and large ones (bandwidth) count alike.
    coef, *_ = np.linalg.lstsq(design / t[:, None], np.ones_like(t), rcond=None)
    alpha, beta = (max(float(c), 0.0) for c in coef)
    return CommModel(alpha, beta)


@dataclass(frozen=True)
class ComputeModel:
    """Step time without communication as ``fixed_s + per_sample_s * batch``."""

    fixed_s: float
    per_sample_s: float

    def step_s(self, batch: int) -> float:
        return self.fixed_s + self.per_sample_s * batch


def fit_compute_model(single: pd.DataFrame) -> ComputeModel:
    """From workers=1 runs: (per_worker_batch, step_time_s) pairs."""
    pts = single[["per_worker_batch", "step_time_s"]].dropna().groupby("per_worker_batch").median()
    if pts.empty:
        raise ValueError("no workers=1 run with a step time")
    b, t = pts.index.to_numpy(float), pts["step_time_s"].to_numpy(float)
    if len(b) == 1:
        return ComputeModel(0.0, t[0] / b[0])
    slope, intercept = np.polyfit(b, t, 1)
    if slope <= 0:  # noise on a flat curve: fall back to proportional
        return ComputeModel(0.0, float(np.median(t / b)))
    return ComputeModel(max(float(intercept), 0.0), float(slope))


@dataclass(frozen=True)
class ScalingModel:
    comm: CommModel
    compute: ComputeModel
    overlap: float
    grad_bytes: float
    bucket_bytes: float
    measured_workers: tuple[int, ...] = ()

    def step_s(self, n: int, batch: int) -> float:
        messages = max(1, math.ceil(self.grad_bytes / self.bucket_bytes))
        comm = self.comm.allreduce_s(self.grad_bytes, n, messages)
        return self.compute.step_s(batch) + (1 - self.overlap) * comm

    def predict(self, workers: list[int], batch: int) -> pd.DataFrame:
        base = self.step_s(1, batch)
        rows = []
        for n in workers:
            step = self.step_s(n, batch)
            rows.append(
                {
                    "workers": n,
                    "per_worker_batch": batch,
                    "step_time_s": step,
                    "samples_per_s": n * batch / step,
                    "efficiency": base / step,
                    "extrapolated": n > max(self.measured_workers, default=1),
                }
            )
        return pd.DataFrame(rows)

    def describe(self) -> dict:
        return {
            **{f"comm.{k}": v for k, v in asdict(self.comm).items()},
            **{f"compute.{k}": v for k, v in asdict(self.compute).items()},
            "overlap": self.overlap,
            "grad_bytes": self.grad_bytes,
            "bucket_bytes": self.bucket_bytes,
        }


def overlap_fraction(runs: pd.DataFrame) -> float:
    """Median share of all-reduce time hidden by DDP; 0 when nothing measured it."""
    if not {"comm_time_s", "exposed_comm_s"} <= set(runs.columns):
        return 0.0
    multi = runs[(runs["workers"] > 1) & (runs["comm_time_s"].fillna(0) > 0)]
    if multi.empty:
        return 0.0
    hidden = 1 - multi["exposed_comm_s"].astype(float) / multi["comm_time_s"].astype(float)
    return float(np.clip(hidden.median(), 0.0, 1.0))


def hardware_key(frame: pd.DataFrame) -> pd.Series:
    """Group key: the user's tag, else the hardware fingerprint."""
    tag = frame.get("hardware.tag", pd.Series(index=frame.index, dtype=object))
    mid = frame.get("hardware.machine_id", pd.Series("unknown", index=frame.index))
    return tag.where(tag.notna() & (tag != ""), mid).astype(str)


def fit_from_results(
    runs: pd.DataFrame, bench: pd.DataFrame, bucket_mb: float = 25.0
) -> ScalingModel:
    """Fit on one (hardware, workload) slice of results."""
    ddp = runs[(runs["mode"] == "ddp") & runs["status"].isin(["complete", "diverged"])]
    single = ddp[ddp["workers"] == 1]
    params = float(ddp["num_params"].dropna().iloc[0])
    precision = str(ddp["precision"].dropna().iloc[0]) if "precision" in ddp else "fp32"
    return ScalingModel(
        comm=fit_comm_model(bench),
        compute=fit_compute_model(single),
        overlap=overlap_fraction(ddp),
        grad_bytes=params * BYTES_PER_PARAM.get(precision, 4),
        bucket_bytes=bucket_mb * 2**20,
        measured_workers=tuple(sorted(int(w) for w in ddp["workers"].unique())),
    )


def validate(model: ScalingModel, runs: pd.DataFrame) -> pd.DataFrame:
    """Prediction against measurement at every measured (workers, batch)."""
    ddp = runs[(runs["mode"] == "ddp") & runs["step_time_s"].notna()]
    rows = []
    for (n, b), grp in ddp.groupby(["workers", "per_worker_batch"]):
        measured = float(grp["step_time_s"].median())
        predicted = model.step_s(int(n), int(b))
        rows.append(
            {
                "workers": int(n),
                "per_worker_batch": int(b),
                "measured_step_s": measured,
                "predicted_step_s": predicted,
                "error_pct": 100 * (predicted - measured) / measured,
                # More worker threads than cores: compute measured alone no longer holds.
                "oversubscribed": bool(grp.get("hardware.oversubscribed", pd.Series()).any()),
            }
        )
    return pd.DataFrame(rows)


def from_profile(
    params: float,
    flops_per_sample: float | None,
    tflops: float,
    mfu: float,
    link_gbps: float,
    latency_us: float,
    bucket_mb: float = 25.0,
    bytes_per_param: int = 4,
) -> ScalingModel:
    """A model from a hand-written hardware profile (no measurements).

    Compute: ``flops_per_sample`` (default 6 x params: forward + backward of a dense net) at
    ``mfu`` of ``tflops``. Link: ``link_gbps`` gigabits per second per rank, ``latency_us`` per hop.
    Overlap is taken as 0 (a pessimistic bound).
    """
    flops = flops_per_sample if flops_per_sample else 6.0 * params
    per_sample = flops / (tflops * 1e12 * mfu)
    comm = CommModel(latency_us * 1e-6, 8.0 / (link_gbps * 1e9))
    return ScalingModel(
        comm, ComputeModel(0.0, per_sample), 0.0, params * bytes_per_param, bucket_mb * 2**20
    )


DEFAULT_WORKERS = [2**k for k in range(13)]  # 1 .. 4096


@dataclass
class Fit:
    """One fitted slice: which machine and workload, the model, and its validation."""

    hardware: str
    workload: str
    model: ScalingModel
    validation: pd.DataFrame


def fit_all(runs: pd.DataFrame, bench: pd.DataFrame) -> tuple[list[Fit], list[str]]:
    """A model per (hardware, workload) that has workers=1 runs and comm-bench results.

    Returns the fits and a list of reasons for the slices that could not be fitted.
    """
    if runs.empty:
        return [], ["no runs"]

    def key(frame: pd.DataFrame) -> pd.Series:  # a report's machine label, when it has one
        return frame["machine"].astype(str) if "machine" in frame else hardware_key(frame)

    runs = runs.assign(_hw=key(runs))
    bench = bench.assign(_hw=key(bench)) if not bench.empty else bench
    fits, skipped = [], []
    for (hw, workload), grp in runs.groupby(["_hw", "workload"]):
        hw_bench = bench[bench["_hw"] == hw] if not bench.empty else bench
        if hw_bench.empty:
            skipped.append(f"{hw}/{workload}: no comm-bench results for this machine")
            continue
        try:
            model = fit_from_results(grp, hw_bench)
        except (ValueError, IndexError, KeyError) as exc:
            skipped.append(f"{hw}/{workload}: {exc}")
            continue
        fits.append(Fit(str(hw), str(workload), model, validate(model, grp)))
    return fits, skipped


def format_fit(fit: Fit, batch: int, workers: list[int]) -> str:
    m = fit.model
    beta = m.comm.beta_s_per_byte
    bandwidth = f"{1 / beta / 1e9:.2f} GB/s" if beta else "unbounded"
    lines = [
        f"== {fit.hardware} / {fit.workload}",
        f"   all-reduce: alpha {m.comm.alpha_s * 1e6:.1f} us, bandwidth {bandwidth}; "
        f"compute {m.compute.fixed_s * 1e3:.3f} ms + {m.compute.per_sample_s * 1e6:.2f} us/sample; "
        f"overlap {100 * m.overlap:.0f} %; gradients {m.grad_bytes / 2**20:.1f} MiB",
    ]
    if not fit.validation.empty:
        lines.append("   validation (measured vs predicted step time):")
        for r in fit.validation.itertuples():
            lines.append(
                f"     workers {r.workers:>4}  batch {r.per_worker_batch:>4}"
                f"  measured {r.measured_step_s * 1e3:8.3f} ms"
                f"  predicted {r.predicted_step_s * 1e3:8.3f} ms  error {r.error_pct:+6.1f} %"
            )
    lines.append(f"   prediction at per-worker batch {batch} (* = extrapolated):")
    for r in m.predict(workers, batch).itertuples():
        mark = "*" if r.extrapolated else " "
        lines.append(
            f"    {mark}workers {r.workers:>5}  step {r.step_time_s * 1e3:9.3f} ms  "
            f"{r.samples_per_s:12.0f} samples/s  efficiency {100 * r.efficiency:5.1f} %"
        )
    return "\n".join(lines)


def write_fits(fits: list[Fit], out_dir, batch: int, workers: list[int]) -> None:
    """predictions.csv, validation.csv and models.csv under ``out_dir``."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    preds, vals, models = [], [], []
    for f in fits:
        key = {"hardware": f.hardware, "workload": f.workload}
        preds.append(f.model.predict(workers, batch).assign(**key))
        vals.append(f.validation.assign(**key))
        models.append({**key, **f.model.describe()})
    pd.concat(preds).to_csv(out / "predictions.csv", index=False)
    pd.concat(vals).to_csv(out / "validation.csv", index=False)
    pd.DataFrame(models).to_csv(out / "models.csv", index=False)
