"""Critical batch: predicted from the gradient noise scale, found as the knee of steps-to-target.

McCandlish et al. (2018) predict the batch beyond which data parallelism stops paying off from
the gradient noise scale B_simple = tr(Sigma) / |G|^2 (B_crit ~ B_noise, which grows during
training). Empirically it is where the steps to a target accuracy leave perfect scaling (steps
proportional to 1/batch). Both come from one convergence group here, as pure functions on frames.

- Runs that stayed near chance (a collapsed model) are left out of both: their B_simple is
  that of a model that did not learn.
- Prediction: the median, over the complete runs of the reference rule, of each run's mean
  B_simple over its evaluations (run.json ``grad_noise_scale.mean``); the band is the median of
  each run's lowest and highest B_simple over training (epochs.csv).
- Knee: steps per batch are the best-tuned ones (Shallue et al. 2018): the lowest, over LR rules,
  of the seed-median steps to target. Perfect scaling is S(B0)·B0/B from the smallest batch B0
  that reached the target; the knee is where steps exceed that by more than ``KNEE_FACTOR``,
  interpolated in log-log space between the last batch within it and the first beyond it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.analysis.report import data

KNEE_FACTOR = 2.0  # "left perfect scaling": more than 2x the perfect-scaling steps
CHANCE_FRACTION = 0.25  # "near chance": less than a quarter of the way from chance to baseline
REFERENCE_RULE = "linear_warmup"  # the rule whose noise scale is plotted and predicted from


# ---- measured noise scale ---------------------------------------------------------------------


def positive(values: pd.Series) -> pd.Series:
    """Finite, positive values only: a non-positive B_simple is estimator noise, not a scale."""
    values = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(float)
    return values[np.isfinite(values) & (values > 0)]


@dataclass(frozen=True)
class NearChance:
    """Runs that did not learn: their gradient noise scale describes no training worth predicting
    from (a collapsed model's B_simple sits at a few samples)."""

    run_ids: frozenset[str]
    floor: float  # final accuracy below which a run counts as near chance


def near_chance(group: pd.DataFrame, epochs: dict[str, pd.DataFrame]) -> NearChance | None:
    """Runs whose final accuracy got less than ``CHANCE_FRACTION`` of the way from chance (the
    untrained model's accuracy, evaluated at epoch 0) to the group's baseline; None when the
    group has no baseline or no evaluation at the start."""
    starts = [
        float(ep["eval_acc"].iloc[0])
        for ep in (epochs.get(r, pd.DataFrame()) for r in group["run_id"])
        if len(ep)
        and "eval_acc" in ep
        and ep["epoch"].iloc[0] == 0
        and np.isfinite(ep["eval_acc"].iloc[0])
    ]
    if not starts or "final_eval_acc" not in group:
        return None
    base = data.baseline(group)
    if base is None:
        return None
    chance = float(np.median(starts))
    floor = chance + CHANCE_FRACTION * (base.acc - chance)
    done = group[group["status"] == "complete"]
    return NearChance(frozenset(done[done["final_eval_acc"] < floor]["run_id"]), floor)


def noise_scale_runs(group: pd.DataFrame, epochs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The complete runs of a group that measured B_simple and learned (see `near_chance`), with
    ``gns_mean`` (the training mean from run.json, else from epochs.csv), ``gns_low`` and
    ``gns_high`` (range over training)."""
    chance = near_chance(group, epochs)
    left_out = chance.run_ids if chance else frozenset()
    rows = []
    done = group[(group["status"] == "complete") & ~group["run_id"].isin(left_out)]
    for _, run in done.iterrows():
        curve = positive(epochs.get(run["run_id"], pd.DataFrame()).get("grad_noise_scale", ()))
        mean = run.get("grad_noise_scale.mean", math.nan)
        if not (pd.notna(mean) and math.isfinite(mean) and mean > 0):
            mean = float(curve.mean()) if len(curve) else math.nan
        if math.isnan(mean):
            continue
        low = float(curve.min()) if len(curve) else math.nan
        high = float(curve.max()) if len(curve) else math.nan
        rows.append({**run.to_dict(), "gns_mean": mean, "gns_low": low, "gns_high": high})
    return pd.DataFrame(rows)


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

    batch: float  # median over runs of the training-mean B_simple
    low: float | None  # median over runs of the lowest B_simple over training
    high: float | None  # ... and of the highest
    rule: str
    runs: int


def predict(measured: pd.DataFrame, rule: str | None) -> Prediction | None:
    """B_crit ~ B_noise from the reference rule's runs, or None when nothing was measured."""
    if rule is None or measured.empty:
        return None
    runs = measured[measured["lr_rule"] == rule]
    if runs.empty:
        return None
    low, high = runs["gns_low"].dropna(), runs["gns_high"].dropna()
    return Prediction(
        batch=float(runs["gns_mean"].median()),
        low=float(low.median()) if len(low) else None,
        high=float(high.median()) if len(high) else None,
        rule=rule,
        runs=len(runs),
    )


# ---- empirical knee ---------------------------------------------------------------------------


def best_steps(group: pd.DataFrame) -> pd.DataFrame:
    """Per global batch: the lowest, over LR rules, of the seed-median steps to target.

    Columns: global_batch, steps_to_target (NaN where no run of any rule reached the target),
    lr_rule (the rule that was best there).
    """
    batches = sorted(int(b) for b in group["global_batch"].dropna().unique())
    table = data.steps_to_target_table(group)
    rows = []
    for batch in batches:
        at = table[table["global_batch"] == batch] if len(table) else table
        if len(at):
            best = at.loc[at["steps_to_target"].idxmin()]
            rows.append((batch, float(best["steps_to_target"]), best["lr_rule"]))
        else:
            rows.append((batch, math.nan, None))
    return pd.DataFrame(rows, columns=["global_batch", "steps_to_target", "lr_rule"])


@dataclass(frozen=True)
class Knee:
    """Where steps-to-target leave perfect scaling by more than ``KNEE_FACTOR``.

    ``batch`` is set only when the curve crosses the line between two measured batches. Otherwise
    the knee lies above ``within`` (the largest batch still within the factor), because the sweep
    ends there (``unreached`` is None) or because no run reached the target at ``unreached``.
    """

    base_batch: int  # B0: the smallest batch that reached the target
    base_steps: float  # S(B0)
    within: int  # the largest batch, from B0 on, whose steps are within the factor
    batch: float | None = None  # interpolated knee
    beyond: int | None = None  # the first batch beyond the factor
    unreached: int | None = None  # the first batch above `within` where no run reached it

    def perfect(self, batch: float) -> float:
        return self.base_steps * self.base_batch / batch


def find_knee(best: pd.DataFrame, factor: float = KNEE_FACTOR) -> Knee | None:
    """The knee of a best-steps table (see `best_steps`); None with fewer than two batches that
    reached the target, where there is no curve to leave perfect scaling."""
    best = best.sort_values("global_batch")
    reached = best[best["steps_to_target"].notna()]
    if len(reached) < 2:
        return None
    b0, s0 = int(reached["global_batch"].iloc[0]), float(reached["steps_to_target"].iloc[0])
    later = best[best["global_batch"] > b0]
    last_b, last_ratio = b0, 1.0
    for batch, steps in zip(later["global_batch"], later["steps_to_target"], strict=True):
        batch = int(batch)
        if math.isnan(steps):
            return Knee(b0, s0, within=last_b, unreached=batch)
        ratio = steps / (s0 * b0 / batch)
        if ratio > factor:
            # linear in (log batch, log ratio) between the last point within and this one
            t = (math.log(factor) - math.log(last_ratio)) / (math.log(ratio) - math.log(last_ratio))
            knee = math.exp(math.log(last_b) + t * (math.log(batch) - math.log(last_b)))
            return Knee(b0, s0, within=last_b, batch=knee, beyond=batch)
        last_b, last_ratio = batch, ratio
    return Knee(b0, s0, within=last_b)
