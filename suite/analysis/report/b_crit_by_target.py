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
from dpsuite.analysis.report.run_frames import run_column

ACCURACY_TARGETS = (0.55, 0.60, 0.65, 0.70, 0.75)  # besides the study's own
LOSS_FACTORS = (1.4, 1.3, 1.2, 1.1)  # loss targets: the study's own times these
TARGET_EVALS_KEY = "config.train.target_evals"


Windows = tuple[np.ndarray, np.ndarray]  # each window's median and the step it is counted at
NO_WINDOWS: Windows = (np.empty(0), np.empty(0))


def windows_of(curve: pd.DataFrame, metric: str, evals: int) -> Windows:
    """The median of each window of ``evals`` consecutive evaluations of ``metric`` (NaN where
    one is not finite), and the step at each window's middle; the same at every target, so
    computed once per run."""
    if curve.empty or metric not in curve or "step" not in curve:
        return NO_WINDOWS
    return windows_of_values(curve[metric].to_numpy(), curve["step"].to_numpy(), evals)


def windows_of_values(values: np.ndarray, steps: np.ndarray, evals: int) -> Windows:
    """``windows_of`` a run's values of the metric and the steps they were taken at."""
    values = values.astype(float)
    if evals < 1 or len(values) < evals:
        return NO_WINDOWS
    windows = np.lib.stride_tricks.sliding_window_view(values, evals)
    finite = np.isfinite(windows).all(axis=1)
    medians = np.full(len(windows), np.nan)
    medians[finite] = np.median(windows[finite], axis=1)
    middle = evals - 1 - evals // 2
    return medians, steps[middle : middle + len(windows)]


def first_hit(windows: Windows, target: float, metric: str) -> float:
    """The step of the first window whose median reaches ``target``, or NaN."""
    medians, steps = windows
    hit = target_study.reaches(medians, target, metric)  # NaN reaches nothing
    return float(steps[np.argmax(hit)]) if hit.any() else math.nan


def hit_step(curve: pd.DataFrame, target: float, metric: str, evals: int) -> float:
    """The step counted as reaching ``target`` on ``metric`` in one run's evaluations, or NaN."""
    return first_hit(windows_of(curve, metric, evals), target, metric)


def run_windows(group: pd.DataFrame, epochs: dict[str, pd.DataFrame], metric: str) -> list[Windows]:
    """``windows_of`` each run of ``group``, in its order, with the run's own window size."""
    evals = group.get(TARGET_EVALS_KEY, pd.Series(1, index=group.index)).fillna(1).astype(int)
    windows = []
    for run_id, n in zip(group["run_id"], evals, strict=True):
        # the run's two columns alone: its frame of a large tree costs more to cut
        values, steps = run_column(epochs, run_id, metric), run_column(epochs, run_id, "step")
        if values is None or steps is None or not len(values):
            windows.append(NO_WINDOWS)
        else:
            windows.append(windows_of_values(values, steps, int(n)))
    return windows


def at_target(
    group: pd.DataFrame, windows: list[Windows], target: float, metric: str
) -> pd.DataFrame:
    """``group`` with ``steps_to_target`` recounted at ``target`` from its runs' windows."""
    return group.assign(steps_to_target=[first_hit(w, target, metric) for w in windows])


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
    comes from), NaN where fewer than 3 tuned batches reached the target; and B_simple near
    that target with its interval (``near_columns``)."""
    metric = target_study.target_of(group)[0]
    windows = run_windows(group, epochs, metric)
    rows = []
    for target in targets_for(group):
        recounted = at_target(group, windows, target, metric)
        best = target_study.oracle(target_study.settings_table(recounted))
        fit = fit_choices.fit_of_best(recounted, best, resamples)
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
                **near_columns(recounted, best, epochs),
            }
        )
    return pd.DataFrame(rows)


def near_columns(
    recounted: pd.DataFrame, best: pd.DataFrame, epochs: dict[str, pd.DataFrame]
) -> dict[str, float]:
    """B_simple near this target (the median over the LR oracle's runs at it, ``best``, each
    pooled over its last steps before its hit there) and the interval of that median; NaN
    without one."""
    # the run ids and what the settings are made of: a wide group costs more to copy
    runs = target_study.oracle_runs(target_study.setting_columns(recounted, "run_id"), best)
    near = critical_batch_fit.predict_near_target(runs, epochs) if len(runs) else None
    if near is None:
        return {"b_simple": math.nan, "b_simple_low": math.nan, "b_simple_high": math.nan}
    return {"b_simple": near.batch, "b_simple_low": near.low, "b_simple_high": near.high}
