"""Fitting the scaling model to measurements: comm-bench results and runs of one machine.

* intra-node link: comm-bench on one node (``world_size <= workers_per_host``), the ring formula
  ``t = 2(n-1) alpha + 2(n-1)/n * S * beta`` by relative least squares over message sizes (small
  messages, latency-bound, and large ones, bandwidth-bound, count alike);
* inter-node link: comm-bench over several nodes (e.g. 2 nodes under torchrun): what the ring
  (the all-reduce PyTorch's gloo runs, and NCCL's for large messages) spends beyond its
  intra-node hops, ``2(m-1) alpha_n + 2(N-1)/N * S * beta_n`` (a ring across nodes runs at its
  slowest link, the network's), fitted the same way;
* compute: step time of ``workers=1`` runs, linear in the batch;
* gradient bytes and buckets: the runs' parameter tensors (``tensors``), precision and
  ``bucket_cap_mb``, packed as DDP packs them;
* the library: the runs' backend (gloo: a ring, as PyTorch runs it; nccl: NCCL's tuning model);
* stragglers: the spread of one worker's measured step times (``steps.csv`` of the workers=1
  runs), whose expected maximum over N ranks a synchronous step waits for.

A hardware profile supplies what was not measured (GPUs per node, a link).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from dpsuite.analysis.scaling import measurement_caveats
from dpsuite.analysis.scaling.allreduce_cost import NCCL_MODEL_VERSION, Library, parse_version
from dpsuite.analysis.scaling.compute import fit_compute_model
from dpsuite.analysis.scaling.measured_bandwidth import from_bench
from dpsuite.analysis.scaling.model import (
    BYTES_PER_PARAM,
    DEFAULT_BUCKET_MB,
    MIB,
    Overheads,
    ScalingModel,
)
from dpsuite.analysis.scaling.strategy_runs import (
    KEYS,
    base_key,
    key_of,
    strategy_keys,
    strategy_of,
)
from dpsuite.analysis.scaling.tensors import tensor_numels
from dpsuite.analysis.scaling.topology import Link, Topology


def _relative_lstsq(design: np.ndarray, y: np.ndarray, t: np.ndarray) -> Link:
    """(alpha, beta) of ``design @ (alpha, beta) = y`` by least squares relative to the measured
    times ``t``, clipped at 0, as a Link (beta 0: no measurable bandwidth limit). A ValueError
    (one line) on a time that is not > 0 or a design that is not finite: there is nothing to
    fit, and numpy's least squares would only print LAPACK's complaints."""
    if not (np.isfinite(t).all() and (t > 0).all()):
        raise ValueError("a comm-bench time is not a positive number, nothing to fit the links to")
    if not (np.isfinite(design).all() and np.isfinite(y).all()):
        raise ValueError("a comm-bench row is not finite, nothing to fit the links to")
    coef, *_ = np.linalg.lstsq(design / t[:, None], y / t, rcond=None)
    alpha, beta = (max(float(c), 0.0) for c in coef)
    return Link(alpha, 1 / beta if beta > 0 else math.inf)


def usable_rows(bench: pd.DataFrame) -> pd.DataFrame:
    """Error-free multi-rank all-reduce rows; oversubscribed benches only when there is nothing
    else."""
    collective = bench.get("collective", pd.Series("all_reduce", index=bench.index))
    rows = bench[(bench["errors"] == 0) & (bench["world_size"] > 1) & (collective == "all_reduce")]
    crowded = rows.get("hardware.oversubscribed", pd.Series(False, index=rows.index))
    crowded = crowded.fillna(False).astype(bool)
    return rows[~crowded] if (~crowded).any() else rows


def _ranks_per_host(rows: pd.DataFrame) -> pd.Series:
    per_host = rows.get("hardware.workers_per_host", pd.Series(np.nan, index=rows.index))
    return per_host.fillna(rows["world_size"]).astype(int)


def fit_intra_link(rows: pd.DataFrame) -> Link:
    """alpha and beta of one node's link from single-node comm-bench rows."""
    n = rows["world_size"].to_numpy(float)
    size = rows["size_bytes"].to_numpy(float)
    t = rows["time_us"].to_numpy(float) * 1e-6
    return _relative_lstsq(np.column_stack([2 * (n - 1), 2 * (n - 1) / n * size]), t, t)


def fit_inter_link(rows: pd.DataFrame, intra: Link) -> Link:
    """alpha and beta of the network from multi-node rows, given the intra-node link."""
    g = _ranks_per_host(rows).to_numpy(float)
    n = rows["world_size"].to_numpy(float)
    m = np.ceil(n / g)
    size = rows["size_bytes"].to_numpy(float)
    t = rows["time_us"].to_numpy(float) * 1e-6
    inside = 2 * (n - m) * intra.latency_s
    design = np.column_stack([2 * (m - 1), 2 * (n - 1) / n * size])
    return _relative_lstsq(design, t - inside, t)


def fit_topology(bench: pd.DataFrame, profile: Topology | None = None) -> Topology:
    """The links this machine's comm-bench measured; the profile's (if any) for the rest."""
    rows = usable_rows(bench) if not bench.empty else bench
    if rows.empty:
        if profile is None:
            raise ValueError("no error-free multi-rank comm-bench rows to fit the links to")
        return profile
    spans = rows["world_size"] > _ranks_per_host(rows)
    multi, single = rows[spans], rows[~spans]
    if single.empty and profile is None:
        raise ValueError("no error-free single-node comm-bench rows to fit the intra-node link")
    intra = fit_intra_link(single) if not single.empty else profile.intra
    if not multi.empty:
        gpus = int(_ranks_per_host(multi).max())
        return Topology(intra, fit_inter_link(multi, intra), gpus)
    if profile is not None:
        # measured latency and bandwidth; the kind of link (NCCL's latencies) the profile's
        return replace(profile, intra=replace(intra, kind=profile.intra.kind))
    return Topology(intra)


def _allreduce_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Finished DDP runs that average gradients by plain all-reduce (what the model is of)."""
    ok = (runs["mode"] == "ddp") & runs["status"].isin(["complete", "diverged"])
    if "sync" in runs:
        ok &= runs["sync"].fillna("allreduce") == "allreduce"
    return runs[ok]


def _strategy_runs(runs: pd.DataFrame, key: str) -> pd.DataFrame:
    """Finished runs of the strategy ``key`` (``strategy_runs.KEYS``)."""
    ok = (runs["mode"] == "ddp") & runs["status"].isin(["complete", "diverged"])
    return runs[ok & (strategy_keys(runs) == key)]


def _oversubscribed(runs: pd.DataFrame) -> pd.Series:
    flag = runs.get("hardware.oversubscribed", pd.Series(False, index=runs.index))
    return flag.fillna(False).astype(bool)


def fit_from_results(
    runs: pd.DataFrame,
    bench: pd.DataFrame,
    profile: Topology | None = None,
    key: str = "ddp",
    per_size: bool = False,
) -> ScalingModel:
    """Fit on one (hardware, workload) slice of results, its runs of strategy ``key``;
    ``per_size``: each all-reduce read off comm-bench's bus bandwidth at its message size
    (``measured_bandwidth``), not the fitted links."""
    ddp = _strategy_runs(runs, key)
    params = float(ddp["num_params"].dropna().iloc[0])
    precision = str(ddp["precision"].dropna().iloc[0]) if "precision" in ddp else "fp32"
    per_param = BYTES_PER_PARAM.get(precision, 4)
    bucket_mb = ddp["bucket_cap_mb"].dropna() if "bucket_cap_mb" in ddp else pd.Series(dtype=float)
    timed = ddp[ddp["step_time_s"].notna() & ~_oversubscribed(ddp)]
    numels = tensor_numels(ddp)
    samples = step_samples(ddp[(ddp["workers"] == 1) & ~_oversubscribed(ddp)])
    topology = fit_topology(bench, profile)
    measured = ["compute", "links"] if topology is not profile else ["compute"]
    if topology.inter is not None and (profile is None or topology.inter is not profile.inter):
        measured.append("network")  # comm-bench ran across nodes
    bandwidth = from_bench(usable_rows(bench)) if per_size and not bench.empty else None
    if bandwidth is not None:
        measured.append("bandwidth per size")
    return ScalingModel(
        topology=topology,
        compute=fit_compute_model(ddp[ddp["workers"] == 1]),
        grad_bytes=params * per_param,
        bucket_bytes=float(bucket_mb.median() if len(bucket_mb) else DEFAULT_BUCKET_MB) * MIB,
        validated_workers=tuple(sorted(int(w) for w in timed["workers"].unique())),
        library=_library(ddp),
        tensor_bytes=tuple(float(n * per_param) for n in numels or ()),
        overheads=Overheads(step_samples=samples),
        measured=(*measured, *(["straggler jitter"] if samples else [])),
        grad_element_bytes=per_param,
        strategy=strategy_of(key, ddp, params * per_param),
        bandwidth=bandwidth,
    )


def _library(runs: pd.DataFrame) -> Library:
    """The runs' backend; NCCL at the version the runs recorded (the model's own if none)."""
    backend = runs.get("backend", pd.Series(dtype=object)).dropna()
    if backend.empty or str(backend.iloc[0]) != "nccl":
        return Library(backend="gloo")
    recorded = runs.get("hardware.nccl", pd.Series(dtype=object)).dropna().astype(str)
    version = recorded.iloc[0] if len(recorded) else NCCL_MODEL_VERSION
    try:
        parse_version(version)
    except ValueError:  # an old torch's integer form (2708): the model's own
        version = NCCL_MODEL_VERSION
    return Library(backend="nccl", nccl_version=version)


def step_samples(single: pd.DataFrame) -> tuple[float, ...]:
    """One worker's measured step times, each run's divided by its own mean (the spread, not
    the level, is what carries to other batch sizes)."""
    from dpsuite.results import load_steps

    pooled: list[float] = []
    for run_dir in single.get("run_dir", pd.Series(dtype=object)).dropna():
        times = load_steps(run_dir)["step_time_s"].dropna().to_numpy(float)
        if len(times) >= 2 and times.mean() > 0:
            pooled.extend((times / times.mean()).tolist())
    return tuple(pooled)


def validate(model: ScalingModel, runs: pd.DataFrame) -> pd.DataFrame:
    """Prediction against measurement at every measured (workers, batch) of the model's
    strategy."""
    ddp = _strategy_runs(runs, key_of(model.strategy))
    ddp = ddp[ddp["step_time_s"].notna()]
    rows = []
    for (n, b), grp in ddp.groupby(["workers", "per_worker_batch"]):
        measured = float(grp["step_time_s"].median())
        step = model.step(int(n), int(b))
        exposed = grp["exposed_comm_s"] if "exposed_comm_s" in grp else pd.Series(dtype=float)
        rows.append(
            {
                "workers": int(n),
                "per_worker_batch": int(b),
                "measured_step_s": measured,
                "predicted_step_s": step.total_s,
                "error_pct": 100 * (step.total_s - measured) / measured,
                "measured_exposed_s": float(exposed.median()) if exposed.notna().any() else None,
                "predicted_exposed_s": step.exposed_s,
                # More worker threads than cores: compute measured alone no longer holds.
                "oversubscribed": bool(_oversubscribed(grp).any()),
            }
        )
    return pd.DataFrame(rows)


def node_efficiency(
    runs: pd.DataFrame, workload: str, batch: int | None = None
) -> tuple[float, int] | None:
    """The measured efficiency of the most workers that ran on one host, and that count.

    Throughput per worker at N over that at 1, at the same per-worker batch (``batch`` if it
    was measured, else the largest that was at both), medians over repeats; oversubscribed runs
    left out. None when there is no such pair.
    """
    ddp = _allreduce_runs(runs)
    ddp = ddp[(ddp["workload"] == workload) & ddp["samples_per_s"].notna() & ~_oversubscribed(ddp)]
    per_host = _ranks_per_host(ddp.assign(world_size=ddp["workers"])) if len(ddp) else None
    one_host = ddp[ddp["workers"] <= per_host] if per_host is not None else ddp
    single = one_host[one_host["workers"] == 1]
    multi = one_host[one_host["workers"] > 1]
    batches = sorted(set(single["per_worker_batch"]) & set(multi["per_worker_batch"]))
    if not batches:
        return None
    b = batch if batch in batches else batches[-1]
    at_b = multi[multi["per_worker_batch"] == b]
    n = int(at_b["workers"].max())
    base = single[single["per_worker_batch"] == b]["samples_per_s"].median()
    top = at_b[at_b["workers"] == n]["samples_per_s"].median()
    return float(top / (n * base)), n


def hardware_key(frame: pd.DataFrame) -> pd.Series:
    """Group key: a report's machine label, else the user's tag, else the fingerprint."""
    if "machine" in frame:
        return frame["machine"].astype(str)
    tag = frame.get("hardware.tag", pd.Series(index=frame.index, dtype=object))
    mid = frame.get("hardware.machine_id", pd.Series("unknown", index=frame.index))
    return tag.where(tag.notna() & (tag != ""), mid).astype(str)


@dataclass
class Fit:
    """One fitted slice: which machine and workload, the model, and its validation."""

    hardware: str
    workload: str
    model: ScalingModel
    validation: pd.DataFrame
    # The validation of the model's own terms, before a term was fitted to the same runs.
    own_terms: pd.DataFrame | None = None
    caveats: tuple[str, ...] = ()  # what its measurements share or lack (measurement_caveats)

    @property
    def label(self) -> str:
        """``hardware / workload``, and the strategy where it is not DDP's all-reduce."""
        strategy = self.model.strategy
        tail = f" / {strategy.label()}" if strategy.name != "ddp" else ""
        return f"{self.hardware} / {self.workload}{tail}"


def _slices(runs: pd.DataFrame, keys: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(hardware, workload, strategy key) of the runs, in that order; only ``keys``."""
    found = runs.assign(_key=strategy_keys(runs)).dropna(subset=["_key"])
    found = found[found["_key"].map(base_key).isin(keys)]
    order = {k: i for i, k in enumerate(KEYS)}
    columns = (found["_hw"], found["workload"], found["_key"])
    triples = {(str(h), str(w), str(k)) for h, w, k in zip(*columns, strict=True)}
    return sorted(triples, key=lambda t: (t[0], t[1], order[base_key(t[2])], t[2]))


def fit_all(
    runs: pd.DataFrame,
    bench: pd.DataFrame,
    profile: Topology | None = None,
    keys: tuple[str, ...] = ("ddp",),
    per_size: bool = False,
) -> tuple[list[Fit], list[str]]:
    """A model per (hardware, workload, strategy of ``keys``: ``strategy_runs.KEYS``) that has
    workers=1 runs and comm-bench results (``per_size``: `fit_from_results`'s).

    Returns the fits and a list of reasons for the slices that could not be fitted.
    """
    if runs.empty:
        return [], ["no runs"]
    runs = runs.assign(_hw=hardware_key(runs))
    bench = bench.assign(_hw=hardware_key(bench)) if not bench.empty else bench
    fits, skipped = [], []
    for hw, workload, key in _slices(runs, keys):
        grp = runs[(runs["_hw"] == hw) & (runs["workload"].astype(str) == workload)]
        name = workload if key == "ddp" else f"{workload} ({key})"
        hw_bench = bench[bench["_hw"] == hw] if not bench.empty else bench
        if hw_bench.empty and profile is None:
            skipped.append(f"{hw}/{name}: no comm-bench results for this machine")
            continue
        try:
            model = fit_from_results(grp, hw_bench, profile, key, per_size)
        except (ValueError, IndexError, KeyError) as exc:
            skipped.append(f"{hw}/{name}: {exc}")
            continue
        found = measurement_caveats.caveats(grp, hw_bench)
        fits.append(Fit(hw, workload, model, validate(model, grp), caveats=found))
    return fits, skipped
