"""Critical batch: fitted to steps-to-target, predicted from the gradient noise scale.

McCandlish et al. (2018) predict the batch beyond which data parallelism stops paying off from
the gradient noise scale B_simple = tr(Sigma) / |G|^2 (B_crit ~ B_noise, which grows during
training). Empirically B_crit = E_min / S_min, from fitting the steps-examples trade-off
S(B) = S_min + E_min / B to the best-tuned steps to a target (McCandlish et al., eq. 2.11). Both
come from one convergence group here, as pure functions on frames.

- Fit: to the LR oracle's seed medians, least squares in relative error, censored batches (no LR
  reached the target in half its seeds: no value) and batches known not to be tuned left out;
  intervals from a bootstrap over seeds, or, where no resample can differ, the range over where
  each hit lies within its evaluation interval (``fit_critical_batch``).
- Near the target (the primary prediction): per run of the LR oracle, B_simple pooled over the
  windows in the last ``NEAR_TARGET`` of its steps before it reached the target; the median over
  runs with its bootstrap interval (``predict_near_target``).
- Pooled from the start (secondary), from the runs that reached the group's target only: a run
  that missed it (a collapsed model, or one whose LR was too large) measured the noise of a
  model that did not learn. Per run its B_simple pooled over every measured step (run.json
  ``grad_noise_scale.pooled``; the mean over windows in older results); the prediction is the
  median over runs, the band the median over runs of the ``BAND`` nearest-rank percentiles of
  each run's windows at its evaluations (epochs.csv).
- Knee (kept beside B_noise + 2·B0, what S = S_min (1 + B_noise/B) gives for it), on the LR
  oracle's curve (`target_study.oracle`, the best-tuned steps per batch):
  perfect scaling is S(B0)·B0/B from the smallest batch B0 that reached the target; the knee is
  the first batch where steps exceed that by more than ``KNEE_FACTOR``, interpolated in log-log
  space between the last batch within it and the first beyond it. A batch where no LR reached
  the target within a budget of more than ``KNEE_FACTOR`` × its perfect-scaling steps is beyond
  it too, without a value to interpolate. Where the budget allows no more than that, steps
  cannot leave the band within it, and the knee is not claimed either way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpsuite.analysis.report import data, stats
from dpsuite.analysis.report.run_frames import run_column

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
    if not (isinstance(values, pd.Series) and values.dtype == np.float64):  # floats: as they are
        values = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(float)
    return values[positive_mask(values.to_numpy())]


def positive_mask(values: np.ndarray) -> np.ndarray:
    """Which values ``positive`` keeps (the test on the array: a Series' operators cost more
    per run)."""
    values = as_floats(values)
    return np.isfinite(values) & (values > 0)


def as_floats(values: np.ndarray) -> np.ndarray:
    """``values`` as float64, what is not a number as NaN."""
    if values.dtype == np.float64:
        return values
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(float)


def positive_curve(epochs: Mapping[str, pd.DataFrame], run_id: str) -> np.ndarray:
    """A run's finite, positive B_simple at each evaluation (its epochs.csv column; empty
    without one), as an array: a Series per run costs more than its values (over thousands of
    runs, seconds)."""
    values = run_column(epochs, run_id, "grad_noise_scale")
    if values is None:
        return np.empty(0)
    values = as_floats(values)
    return values[positive_mask(values)]


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
    # records, not iterrows: the same values (boxed alike) without a Series per run
    for run in keep.to_dict("records"):
        curve = positive_curve(epochs, run["run_id"])
        value = positive_value(run.get("grad_noise_scale.pooled"))
        if math.isnan(value):
            value = positive_value(run.get("grad_noise_scale.mean"))
        if math.isnan(value):
            value = float(curve.mean()) if len(curve) else math.nan
        if math.isnan(value):
            continue
        low, high = (stats.nearest_rank(curve, q) for q in BAND)
        rows.append({**run, "gns": value, "gns_low": low, "gns_high": high})
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


# An evaluation's columns a noise-scale curve is made of.
CURVE_COLUMNS = ("epoch", "samples_seen", "grad_noise_scale")


def noise_scale_curves(
    measured: pd.DataFrame, epochs: dict[str, pd.DataFrame], rule: str
) -> pd.DataFrame:
    """B_simple by epoch per global batch for one rule, averaged over seeds at each evaluation.

    Columns: global_batch, epoch, samples_seen, grad_noise_scale, seeds. Evaluations without a
    positive estimate (before the first one, or estimator noise) are left out.
    """
    parts = []
    runs = measured[measured["lr_rule"] == rule]
    # each run's three columns as arrays, not its frame: cutting and filtering a frame per run
    # costs more than the curves over thousands of runs
    for run_id, batch in zip(runs["run_id"], runs["global_batch"], strict=True):
        columns = [run_column(epochs, run_id, c) for c in CURVE_COLUMNS]
        if any(c is None for c in columns) or not len(columns[0]):
            continue
        keep = positive_mask(columns[2])
        if keep.any():
            parts.append([c[keep] for c in columns] + [np.full(int(keep.sum()), int(batch))])
    if not parts:
        return pd.DataFrame(
            columns=["global_batch", "epoch", "samples_seen", "grad_noise_scale", "seeds"]
        )
    rows = pd.DataFrame(
        {
            name: np.concatenate([part[i] for part in parts])
            for i, name in enumerate([*CURVE_COLUMNS, "global_batch"])
        }
    )
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


def predicted_over_found(predicted: float, knee: Knee) -> tuple[float, float] | None:
    """A predicted knee / the found knee as (low, high): equal when the knee was interpolated,
    a range when it is only bracketed, (0, bound) when it lies above the largest batch; None
    when the knee is not placed."""
    if knee.batch is not None:
        ratio = predicted / knee.batch
        return ratio, ratio
    if knee.beyond is not None:
        return predicted / knee.beyond, predicted / knee.within
    if knee.placed:
        return 0.0, predicted / knee.within
    return None


def predicted_knee(b_noise: float, base_batch: int) -> float:
    """Where S = S_min (1 + B_noise / B) leaves ``KNEE_FACTOR`` × perfect scaling from B0:
    S(B) B / (S(B0) B0) = (B + B_noise) / (B0 + B_noise) = 2 at B = B_noise + 2 B0 (for the
    factor 2; in general B_noise (f - 1) + f B0)."""
    return b_noise * (KNEE_FACTOR - 1) + KNEE_FACTOR * base_batch


# ---- B_crit fitted: the steps-examples trade-off ----------------------------------------------

FIT_RESAMPLES = 1000  # bootstrap resamples of the seeds
FIT_CONFIDENCE = 0.95
MAX_CORNERS = 4096  # granularity corners fitted exactly up to this many (12 batches), else drawn
# Where a fit's intervals come from (``CriticalFit.source``).
FROM_SEEDS = "seeds"
FROM_GRANULARITY = "evaluation granularity"
NO_INTERVAL = "none"


def fit_steps(batches: np.ndarray, steps: np.ndarray, relative: bool = True) -> tuple[float, float]:
    """(S_min, E_min) of S(B) = S_min + E_min / B by least squares in relative error (each
    point weighs 1 / S², so the few steps of large batches count as much as the many of small
    ones): linear in x = 1/B with weights 1/S; ``relative=False``: in absolute error."""
    x = 1.0 / np.asarray(batches, float)
    w = 1.0 / np.asarray(steps, float) if relative else np.ones_like(x)
    design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (s_min, e_min), *_ = np.linalg.lstsq(design, np.asarray(steps, float) * w, rcond=None)
    return float(s_min), float(e_min)


def b_crit_of(s_min: float, e_min: float) -> float:
    """E_min / S_min; infinite where the fit has no floor (S_min <= 0: steps keep falling as
    fast as 1/B over the batches measured)."""
    return e_min / s_min if s_min > 0 else math.inf


@dataclass(frozen=True)
class CriticalFit:
    """S(B) = S_min + E_min / B fitted to the LR oracle's seed medians, B_crit = E_min / S_min,
    each with its interval (``source``): a bootstrap over seeds where the seeds vary the
    answer, else the range over where each batch's hit lies within one evaluation interval."""

    s_min: float
    e_min: float
    b_crit: float
    s_min_ci: tuple[float, float]
    e_min_ci: tuple[float, float]
    b_crit_ci: tuple[float, float]
    batches: list[int]  # the batches fitted
    censored: list[int]  # left out: no LR reached the target in half its seeds
    untuned: list[int]  # left out: not known to be tuned
    resamples: int
    source: str = FROM_SEEDS  # FROM_SEEDS, FROM_GRANULARITY or NO_INTERVAL
    why_not_seeds: str = ""  # why the seeds give no interval, where they do not

    def steps(self, batch: float) -> float:
        return self.s_min + self.e_min / batch


def fit_critical_batch(
    best: pd.DataFrame,
    seeds: dict[tuple[str, int], np.ndarray],
    exclude: set[int] = frozenset(),
    resamples: int = FIT_RESAMPLES,
    granularity: dict[int, float] | None = None,
    relative: bool = True,
) -> CriticalFit | None:
    """Fit the oracle's finite seed medians (``target_study.oracle``), leaving out censored
    batches (a median that is never has no value to fit) and ``exclude`` (batches known not to
    be tuned); None with fewer than 3 batches. The bootstrap resamples the seeds of every LR
    setting at every fitted batch, takes the oracle again (the fewest censored-median steps over
    the settings, so the choice of the best LR is resampled too) and fits again. Where no
    resample differs (one seed per setting, or every seed hitting at the same evaluation) the
    intervals come from ``granularity`` (steps per evaluation at each batch) instead: a hit is
    only known to within the evaluation interval before it (`granularity_intervals`)."""
    finite = best[np.isfinite(best["steps"])]
    censored = sorted(int(b) for b in best[~np.isfinite(best["steps"])]["global_batch"])
    kept = finite[~finite["global_batch"].isin(exclude)].sort_values("global_batch")
    if len(kept) < 3:
        return None
    batches = kept["global_batch"].to_numpy(int)
    steps = kept["steps"].to_numpy(float)
    s_min, e_min = fit_steps(batches, steps, relative)
    fits = [fit_steps(batches, d, relative) for d in seed_draws(batches, seeds, resamples)]
    point = (s_min, e_min, b_crit_of(s_min, e_min))
    source, why = FROM_SEEDS, ""
    if len({round(b_crit_of(*f), 9) for f in fits}) <= 1:
        why = (
            "no bootstrap resample of the seeds differs (one seed per setting, or every seed "
            "hitting at the same evaluation)"
        )
        fits, source = [], NO_INTERVAL
        if granularity and all(granularity.get(int(b), 0) > 0 for b in batches):
            width = np.array([granularity[int(b)] for b in batches], float)
            fits = [fit_steps(batches, d, relative) for d in corners(steps, width)]
            source = FROM_GRANULARITY
    # the box's corners are not a distribution: their whole range is the interval
    bounds = interval if source == FROM_SEEDS else value_range
    cis = [
        containing(bounds(np.array(values)), p) if fits else (math.nan, math.nan)
        for values, p in zip(
            ([f[0] for f in fits], [f[1] for f in fits], [b_crit_of(*f) for f in fits]),
            point,
            strict=True,
        )
    ]
    return CriticalFit(
        *point,
        *cis,
        batches=[int(b) for b in batches],
        censored=censored,
        untuned=sorted(int(b) for b in exclude if b in set(finite["global_batch"])),
        resamples=len(fits),
        source=source,
        why_not_seeds=why,
    )


def seed_draws(
    batches: np.ndarray, seeds: dict[tuple[str, int], np.ndarray], resamples: int
) -> list[np.ndarray]:
    """Per bootstrap resample, the oracle's steps at each batch: the fewest censored-median
    steps over the settings, each setting's seeds resampled; resamples with a censored batch
    are dropped."""
    rng = np.random.default_rng(0)
    draws = np.full((resamples, len(batches)), math.inf)
    for (_, batch), steps in sorted(seeds.items()):
        if batch not in batches:
            continue
        pick = rng.integers(0, len(steps), size=(resamples, len(steps)))
        medians = np.median(steps[pick], axis=1)  # inf where half or more missed
        col = int(np.flatnonzero(batches == batch)[0])
        draws[:, col] = np.minimum(draws[:, col], medians)
    return [d for d in draws if np.isfinite(d).all()]


def corners(steps: np.ndarray, width: np.ndarray) -> list[np.ndarray]:
    """The hit at each batch somewhere in (steps - width, steps]: the corners of that box (every
    batch at either end), drawn at random (seeded) beyond ``MAX_CORNERS``."""
    n = len(steps)
    if 2**n <= MAX_CORNERS:
        lows = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    else:
        lows = np.random.default_rng(0).integers(0, 2, size=(MAX_CORNERS, n))
    return list(steps - lows * np.minimum(width, steps - 1))


def containing(ci: tuple[float, float], point: float) -> tuple[float, float]:
    """The interval widened to its point where it leaves it out: the oracle's minimum over
    settings is biased low under resampling, and an interval must hold what it qualifies."""
    low, high = ci
    if math.isnan(low) or math.isnan(high):
        return ci
    return min(low, point), max(high, point)


def value_range(values: np.ndarray) -> tuple[float, float]:
    """The smallest and largest value (infinite values sort last)."""
    ordered = np.sort(np.asarray(values, float))
    return float(ordered[0]), float(ordered[-1])


def interval(values: np.ndarray) -> tuple[float, float]:
    """The central ``FIT_CONFIDENCE`` nearest-rank interval (infinite values sort last)."""
    if not len(values):
        return math.nan, math.nan
    ordered = np.sort(np.asarray(values, float))
    tail = (1 - FIT_CONFIDENCE) / 2

    def rank(q: float) -> float:
        return float(ordered[min(max(math.ceil(q * len(ordered)), 1), len(ordered)) - 1])

    return rank(tail), rank(1 - tail)


# ---- B_simple near the target ----------------------------------------------------------------

NEAR_TARGET = 0.25  # the last quarter of the steps before a run reached the target


# A run's epochs.csv columns its B_simple near the target is pooled from.
NEAR_COLUMNS = ("step", "gns_grad_sq", "gns_trace")


def near_target_value(
    step: np.ndarray, grad_sq: np.ndarray, trace: np.ndarray, hit_step: float
) -> float:
    """B_simple near the target from one run's evaluations (its ``NEAR_COLUMNS`` as arrays):
    the windows seen at evaluations in the last ``NEAR_TARGET`` of the steps up to ``hit_step``
    (at least the last window before it), pooled as Σ tr(Σ) / Σ |G|² (windows of equal length
    weigh equally). A window is counted once however many evaluations saw it; NaN without
    one. It runs once per oracle run and target, thousands of times in a large tree."""
    if not math.isfinite(hit_step):
        return math.nan
    keep = np.flatnonzero((step <= hit_step) & np.isfinite(grad_sq) & np.isfinite(trace))
    if not len(keep):
        return math.nan
    # each window once, where first seen: the first index of each distinct (|G|², tr) pair
    _, first = np.unique(grad_sq[keep] + 1j * trace[keep], return_index=True)
    chosen = keep[np.sort(first)]
    near = chosen[step[chosen] >= (1 - NEAR_TARGET) * hit_step]
    if not len(near):
        near = chosen[-1:]
    grad_sq_sum, trace_sum = float(grad_sq[near].sum()), float(trace[near].sum())
    return trace_sum / grad_sq_sum if grad_sq_sum > 0 and trace_sum > 0 else math.nan


def run_near_target(epochs: Mapping[str, pd.DataFrame], run_id: str, hit_step: float) -> float:
    """``near_target_value`` of one run (NaN without its columns), read without cutting its
    frame."""
    columns = [run_column(epochs, run_id, c) for c in NEAR_COLUMNS]
    if any(c is None for c in columns):
        return math.nan
    step, grad_sq, trace = (np.asarray(c, dtype=float) for c in columns)
    return near_target_value(step, grad_sq, trace, hit_step)


@dataclass(frozen=True)
class NearTarget:
    """B_simple near the target, from the LR oracle's runs: the median over runs with the
    bootstrap interval of that median."""

    batch: float
    low: float
    high: float
    runs: int  # oracle runs with a value
    without: int  # oracle runs that reached the target without a window to read


def predict_near_target(
    oracle_runs: pd.DataFrame, epochs: dict[str, pd.DataFrame]
) -> NearTarget | None:
    """From the runs of the best LR at each batch that reached the target (run_id, steps)."""
    values = [
        run_near_target(epochs, run_id, steps)
        for run_id, steps in zip(oracle_runs["run_id"], oracle_runs["steps"], strict=True)
    ]
    ok = np.array([v for v in values if math.isfinite(v)])
    if not len(ok):
        return None
    low, high = stats.median_ci(ok)
    return NearTarget(float(np.median(ok)), low, high, len(ok), len(values) - len(ok))
