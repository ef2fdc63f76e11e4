"""Critical batch: predicted from the gradient noise scale, found as the knee of steps-to-target.

McCandlish et al. (2018) predict the batch beyond which data parallelism stops paying off from
the gradient noise scale B_simple = tr(Sigma) / |G|^2 (B_crit ~ B_noise, which grows during
training). Empirically it is where the steps to a target accuracy leave perfect scaling (steps
proportional to 1/batch). Both come from one convergence group here, as pure functions on frames.

- Prediction, from the runs that reached the group's target only: a run that missed it (a
  collapsed model, or one whose LR was too large) measured the noise of a model that did not
  learn. Per run its B_simple pooled over every measured step (run.json
  ``grad_noise_scale.pooled``; the mean over windows in older results); the prediction is the
  median over runs, the band the median over runs of the ``BAND`` nearest-rank percentiles of
  each run's windows at its evaluations (epochs.csv).
- Knee, on the LR oracle's curve (`target_study.oracle`, the best-tuned steps per batch):
  perfect scaling is S(B0)·B0/B from the smallest batch B0 that reached the target; the knee is
  the first batch where steps exceed that by more than ``KNEE_FACTOR``, interpolated in log-log
  space between the last batch within it and the first beyond it. A batch where no LR reached
  the target within a budget of more than ``KNEE_FACTOR`` × its perfect-scaling steps is beyond
  it too, without a value to interpolate. Where the budget allows no more than that, steps
  cannot leave the band within it, and the knee is not claimed either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.analysis.report import data, stats

KNEE_FACTOR = 2.0  # "left perfect scaling": more than 2x the perfect-scaling steps
BAND = (10, 90)  # percentiles of a run's windows that bound its B_simple over training
REFERENCE_RULE = "linear_warmup"  # the rule whose noise scale is drawn over training
# How each `grad_noise_scale.method` splits a step's batch into the two estimates it compares.
METHODS = {
    "ranks": "each worker's gradient (B_small: the per-worker batch) against the all-reduced one "
    "(B_big: the global batch)",
    "micro_batches": "each simulated worker's micro-batch gradient (B_small: the per-worker batch) "
    "against their mean (B_big: the global batch)",
    "halves": "the gradients of the two halves of each global batch (B_small: half of it) "
    "against the whole batch's (B_big)",
}


# ---- measured noise scale ---------------------------------------------------------------------


def positive(values: pd.Series) -> pd.Series:
    """Finite, positive values only: a non-positive B_simple is estimator noise, not a scale."""
    values = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(float)
    return values[np.isfinite(values) & (values > 0)]


def positive_value(value) -> float:
    """The value when it is a finite positive number, else NaN."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) and value > 0 else math.nan


@dataclass(frozen=True)
class Trained:
    """The runs a prediction may use, and what was left out and why."""

    runs: pd.DataFrame  # with gns (the run's B_simple), gns_low and gns_high (over training)
    left_out: int  # finished runs that did not reach the target
    reason: str  # what those runs did not do


def trained_runs(group: pd.DataFrame, epochs: dict[str, pd.DataFrame]) -> Trained:
    """The complete runs that reached the target and measured B_simple, with ``gns`` (pooled,
    else the mean over windows, else the mean at the evaluations), ``gns_low`` and ``gns_high``
    (the ``BAND`` percentiles over training)."""
    finished = group[group["status"].isin(["complete", "diverged"])]
    keep = finished[(finished["status"] == "complete") & finished["steps_to_target"].notna()]
    rows = []
    for _, run in keep.iterrows():
        curve = positive(epochs.get(run["run_id"], pd.DataFrame()).get("grad_noise_scale", ()))
        value = positive_value(run.get("grad_noise_scale.pooled"))
        if math.isnan(value):
            value = positive_value(run.get("grad_noise_scale.mean"))
        if math.isnan(value):
            value = float(curve.mean()) if len(curve) else math.nan
        if math.isnan(value):
            continue
        low, high = (stats.nearest_rank(curve, q) for q in BAND)
        rows.append({**run.to_dict(), "gns": value, "gns_low": low, "gns_high": high})
    return Trained(pd.DataFrame(rows), len(finished) - len(keep), "did not reach the target")


def methods_text(runs: pd.DataFrame) -> str:
    """How the runs measured B_simple, in words, from their recorded method."""
    methods = runs.get("grad_noise_scale.method", pd.Series(dtype=object)).dropna().unique()
    known = [METHODS[m] for m in sorted(methods) if m in METHODS]
    if not known:
        return "two batch sizes (method not recorded)"
    return "; ".join(known)


def reference_rule(measured: pd.DataFrame) -> str | None:
    """`linear_warmup` when it measured B_simple, else the first rule (docs order) that did."""
    if measured.empty:
        return None
    rules = data.rule_order(measured["lr_rule"])
    return REFERENCE_RULE if REFERENCE_RULE in rules else rules[0]


def noise_scale_curves(
    measured: pd.DataFrame, epochs: dict[str, pd.DataFrame], rule: str
) -> pd.DataFrame:
    """B_simple by epoch per global batch for one rule, averaged over seeds at each evaluation.

    Columns: global_batch, epoch, samples_seen, grad_noise_scale, seeds. Evaluations without a
    positive estimate (before the first one, or estimator noise) are left out.
    """
    parts = []
    for _, run in measured[measured["lr_rule"] == rule].iterrows():
        ep = epochs.get(run["run_id"], pd.DataFrame())
        if ep.empty:
            continue
        ok = ep[ep.index.isin(positive(ep["grad_noise_scale"]).index)]
        parts.append(
            ok[["epoch", "samples_seen", "grad_noise_scale"]].assign(
                global_batch=int(run["global_batch"])
            )
        )
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(
            columns=["global_batch", "epoch", "samples_seen", "grad_noise_scale", "seeds"]
        )
    rows = pd.concat(parts, ignore_index=True)
    curves = rows.groupby(["global_batch", "epoch"], as_index=False).agg(
        samples_seen=("samples_seen", "mean"),
        grad_noise_scale=("grad_noise_scale", "mean"),
        seeds=("grad_noise_scale", "size"),
    )
    return curves.sort_values(["global_batch", "epoch"]).reset_index(drop=True)


@dataclass(frozen=True)
class Prediction:
    """The critical batch predicted from the measured gradient noise scale."""

    batch: float  # median over the runs of their B_simple
    low: float | None  # median over runs of their BAND[0] percentile over training
    high: float | None  # ... and of their BAND[1] percentile
    runs: int
    pooled: bool  # every run's value pooled over its steps (else means over windows)


def predict(trained: pd.DataFrame) -> Prediction | None:
    """B_crit ~ B_noise from the runs that trained, or None when none measured it."""
    if trained.empty:
        return None
    low, high = trained["gns_low"].dropna(), trained["gns_high"].dropna()
    pooled = trained.get("grad_noise_scale.pooled", pd.Series(dtype=float))
    return Prediction(
        batch=float(trained["gns"].median()),
        low=float(low.median()) if len(low) else None,
        high=float(high.median()) if len(high) else None,
        runs=len(trained),
        pooled=bool((pd.to_numeric(pooled, errors="coerce") > 0).all()),
    )


# ---- empirical knee ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Knee:
    """Where steps-to-target leave perfect scaling by more than ``KNEE_FACTOR``.

    Found: ``batch`` (interpolated between ``within`` and ``beyond``), or only ``beyond`` when no
    LR reached the target there within a budget that left room to. Not found: above ``within``
    because the sweep ends there; or not placed, because at ``unreached`` no LR reached the
    target within a budget too short to tell, or from ``short_budget`` on the budget left no
    room beyond the factor.
    """

    base_batch: int  # B0: the smallest batch that reached the target
    base_steps: float  # S(B0)
    within: int  # the largest batch, from B0 on, whose steps are within the factor
    batch: float | None = None  # interpolated knee
    beyond: int | None = None  # the first batch beyond the factor
    unreached: int | None = None  # the first batch above `within` where no LR reached it
    short_budget: int | None = None  # the first batch whose budget allows no more than the factor
    room: float | None = None  # budget / perfect-scaling steps at `unreached` or `short_budget`

    def perfect(self, batch: float) -> float:
        return self.base_steps * self.base_batch / batch

    @property
    def found(self) -> bool:
        return self.beyond is not None

    @property
    def placed(self) -> bool:
        """Whether the data say where the knee is (found, or above the largest batch with room
        to have shown it)."""
        return self.found or (self.unreached is None and self.short_budget is None)


def find_knee(best: pd.DataFrame, factor: float = KNEE_FACTOR) -> Knee | None:
    """The knee of an oracle table (`target_study.oracle`: global_batch, steps with inf where no
    LR reached the target, budget_steps); None without a batch above the smallest that reached
    it."""
    best = best.sort_values("global_batch")
    reached = best[np.isfinite(best["steps"])]
    if reached.empty:
        return None
    b0, s0 = int(reached["global_batch"].iloc[0]), float(reached["steps"].iloc[0])
    later = best[best["global_batch"] > b0]
    if later.empty:
        return None
    last_b, last_ratio, short = b0, 1.0, None
    for _, row in later.iterrows():
        batch = int(row["global_batch"])
        perfect = s0 * b0 / batch
        room = float(row["budget_steps"]) / perfect  # NaN when the budget is not recorded
        if not math.isfinite(row["steps"]):
            beyond = batch if room > factor else None
            return Knee(b0, s0, within=last_b, beyond=beyond, unreached=batch, room=room)
        ratio = row["steps"] / perfect
        if ratio > factor:
            # linear in (log batch, log ratio) between the last point within and this one
            t = (math.log(factor) - math.log(last_ratio)) / (math.log(ratio) - math.log(last_ratio))
            knee = math.exp(math.log(last_b) + t * (math.log(batch) - math.log(last_b)))
            return Knee(b0, s0, within=last_b, batch=knee, beyond=batch)
        if short is None and room <= factor:
            short = (batch, room)
        last_b, last_ratio = batch, ratio
    if short is None:
        return Knee(b0, s0, within=last_b)
    return Knee(b0, s0, within=last_b, short_budget=short[0], room=short[1])


def predicted_over_found(prediction: Prediction, knee: Knee) -> tuple[float, float] | None:
    """predicted B_crit / found knee as (low, high): equal when the knee was interpolated, a
    range when it is only bracketed, (0, bound) when it lies above the largest batch; None
    when the knee is not placed."""
    if knee.batch is not None:
        ratio = prediction.batch / knee.batch
        return ratio, ratio
    if knee.beyond is not None:
        return prediction.batch / knee.beyond, prediction.batch / knee.within
    if knee.placed:
        return 0.0, prediction.batch / knee.within
    return None
