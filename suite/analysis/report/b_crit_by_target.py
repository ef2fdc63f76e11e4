"""B_crit at several targets, from the runs' evaluations (epochs.csv) with the study's own
hitting rule, as McCandlish et al. (2018) find it growing as the target gets harder.

A run's hit at a target is the first window of ``train.target_evals`` consecutive evaluations
whose median reaches it (at or above for an accuracy, at or below for a loss), counted at the
window's middle: what the run itself records for its own target. Runs that stop at their
target have no evaluations beyond it, so only easier targets than the study's are asked there.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dpsuite.analysis.report import critical_batch_fit, fit_choices, target_study

ACCURACY_TARGETS = (0.55, 0.60, 0.65, 0.70, 0.75)  # besides the study's own
LOSS_FACTORS = (1.4, 1.3, 1.2, 1.1)  # loss targets: the study's own times these
TARGET_EVALS_KEY = "config.train.target_evals"


def hit_step(curve: pd.DataFrame, target: float, metric: str, evals: int) -> float:
    """The step counted as reaching ``target`` on ``metric`` in one run's evaluations, or NaN."""
    if curve.empty or metric not in curve or "step" not in curve:
        return math.nan
    values = curve[metric].to_numpy(float)
    for end in range(evals, len(values) + 1):
        window = values[end - evals : end]
        if (
            np.isfinite(window).all()
            and target_study.reaches(np.array([np.median(window)]), target, metric)[0]
        ):
            return float(curve["step"].iloc[end - 1 - evals // 2])
    return math.nan


def at_target(
    group: pd.DataFrame, epochs: dict[str, pd.DataFrame], target: float, metric: str
) -> pd.DataFrame:
    """``group`` with ``steps_to_target`` recounted at ``target`` from its evaluations."""
    evals = group.get(TARGET_EVALS_KEY, pd.Series(1, index=group.index)).fillna(1).astype(int)
    hits = [
        hit_step(epochs.get(run_id, pd.DataFrame()), target, metric, int(n))
        for run_id, n in zip(group["run_id"], evals, strict=True)
    ]
    return group.assign(steps_to_target=hits)


def targets_for(group: pd.DataFrame) -> list[float]:
    """The targets to ask, easiest first, ending with the study's own; none harder than it
    where runs stop at their target."""
    metric, own = target_study.target_of(group)
    if metric == target_study.LOSS:
        return sorted({round(own * f, 6) for f in LOSS_FACTORS} | {own}, reverse=True)
    return sorted({t for t in ACCURACY_TARGETS if t < own - 1e-9} | {own})


def by_target(
    group: pd.DataFrame,
    epochs: dict[str, pd.DataFrame],
    resamples: int = critical_batch_fit.FIT_RESAMPLES,
) -> pd.DataFrame:
    """Per target: the fit's batches, S_min, E_min, B_crit and its interval (and where that
    comes from); NaN where fewer than 3 tuned batches reached the target."""
    metric = target_study.target_of(group)[0]
    rows = []
    for target in targets_for(group):
        fit = fit_choices.fit_group(at_target(group, epochs, target, metric), resamples)
        rows.append(
            {
                "target": target,
                "batches": len(fit.batches) if fit else 0,
                "untuned": fit.untuned if fit else [],
                "censored": fit.censored if fit else [],
                "s_min": fit.s_min if fit else math.nan,
                "e_min": fit.e_min if fit else math.nan,
                "b_crit": fit.b_crit if fit else math.nan,
                "low": fit.b_crit_ci[0] if fit else math.nan,
                "high": fit.b_crit_ci[1] if fit else math.nan,
                "source": fit.source if fit else critical_batch_fit.NO_INTERVAL,
            }
        )
    return pd.DataFrame(rows)
