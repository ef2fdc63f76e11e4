"""B_crit of a steps-to-target group, and how far the documented fit choices move it.

`fit_group` runs the whole study on a group's runs (settings, LR oracle, the batches it cannot
vouch for, the fit) so that the same answer can be asked of part of the runs or at another
target. `spread` refits the oracle's curve under each alternative the answer depends on:
least squares in absolute rather than relative error, each fitted batch left out in turn, and
the LR settings with warmup only or without it only (at the base batch warmup from the base LR
changes nothing, so its runs count in both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpsuite.analysis.report import critical_batch_fit, target_study

EVALS_KEY = "config.train.evals_per_epoch"


def granularity(group: pd.DataFrame) -> dict[int, float]:
    """Steps between evaluations per global batch: a hit is only known to within one."""
    if "steps_per_epoch" not in group:
        return {}
    evals = group.get(EVALS_KEY, pd.Series(1.0, index=group.index)).fillna(1.0).astype(float)
    per_eval = group["steps_per_epoch"].astype(float) / evals.clip(lower=1.0)
    table = per_eval.groupby(group["global_batch"].astype(int)).median().dropna()
    return {int(b): float(v) for b, v in table.items()}


def not_tuned(best: pd.DataFrame, seeds: dict[tuple[str, int], np.ndarray]) -> set[int]:
    """The batches the oracle cannot vouch for: too few LRs, the best at the grid's edge, or
    steps falling faster than perfect scaling from it."""
    faster = target_study.faster_than_perfect(best, seeds)
    flagged = target_study.untuned(best)
    return {int(b) for b in [*faster["global_batch"], *flagged["global_batch"]]}


def fit_group(
    group: pd.DataFrame, resamples: int = critical_batch_fit.FIT_RESAMPLES
) -> critical_batch_fit.CriticalFit | None:
    """The study's fit on ``group``'s runs, untuned batches left out."""
    return fit_of_best(group, target_study.oracle(target_study.settings_table(group)), resamples)


def fit_of_best(
    group: pd.DataFrame,
    best: pd.DataFrame,
    resamples: int = critical_batch_fit.FIT_RESAMPLES,
) -> critical_batch_fit.CriticalFit | None:
    """``fit_group`` for a caller that has the group's oracle (``best``) already."""
    if best.empty:
        return None
    seeds = target_study.seed_steps(group)
    return critical_batch_fit.fit_critical_batch(
        best, seeds, not_tuned(best, seeds), resamples, granularity(group)
    )


def point_b_crit(
    group: pd.DataFrame, drop: frozenset[int] = frozenset(), relative: bool = True
) -> float:
    """B_crit alone (no interval) of the study's fit on ``group``, ``drop`` left out too; NaN
    with fewer than 3 batches to fit."""
    best = target_study.oracle(target_study.settings_table(group))
    if best.empty:
        return math.nan
    return b_crit_of_best(best, target_study.seed_steps(group), drop, relative)


def b_crit_of_best(
    best: pd.DataFrame,
    seeds: pd.DataFrame,
    drop: frozenset[int] = frozenset(),
    relative: bool = True,
) -> float:
    """``point_b_crit`` from a group's best settings (``target_study.oracle``) and its
    ``target_study.seed_steps``, for a caller that has them already."""
    kept = best[np.isfinite(best["steps"])]
    kept = kept[~kept["global_batch"].isin(not_tuned(best, seeds) | set(drop))]
    if len(kept) < 3:
        return math.nan
    fitted = critical_batch_fit.fit_steps(
        kept["global_batch"].to_numpy(float), kept["steps"].to_numpy(float), relative
    )
    return critical_batch_fit.b_crit_of(*fitted)


@dataclass(frozen=True)
class Spread:
    """B_crit under each alternative fit choice (label -> value; NaN where it cannot fit)."""

    choices: dict[str, float]

    @property
    def values(self) -> list[float]:
        return [v for v in self.choices.values() if not math.isnan(v)]

    @property
    def low(self) -> float:
        return min(self.values, default=math.nan)

    @property
    def high(self) -> float:
        return max(self.values, default=math.nan)


def warmup_parts(group: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The runs with warmup only and without it only, each with the base batch's base-LR runs
    (where warmup from the base LR is no warmup); empty where the group has only one kind."""
    warm = group["warmup_epochs"].fillna(0).astype(float) > 0
    base = target_study.base_batch(group)
    shared = (group["global_batch"] == base) & np.isclose(
        group["peak_lr"].astype(float), group["base_lr"].astype(float)
    )
    if warm[~shared].all() or not warm[~shared].any():
        return {}
    return {
        "warmup settings only": group[warm | shared],
        "no-warmup settings only": group[~warm | shared],
    }


def spread(
    group: pd.DataFrame,
    fit: critical_batch_fit.CriticalFit,
    best: pd.DataFrame | None = None,
    seeds: pd.DataFrame | None = None,
) -> Spread:
    """B_crit under the documented alternatives to ``fit``'s choices; ``best`` and ``seeds``:
    the group's, where the caller has them (each alternative refits from them, not from the
    group's runs again)."""
    if best is None or seeds is None:
        best = target_study.oracle(target_study.settings_table(group))
        seeds = target_study.seed_steps(group)

    def refit(drop: frozenset[int] = frozenset(), relative: bool = True) -> float:
        return math.nan if best.empty else b_crit_of_best(best, seeds, drop, relative)

    choices = {"absolute-error fit": refit(relative=False)}
    for batch in fit.batches:
        choices[f"without batch {batch}"] = refit(frozenset({batch}))
    for label, part in warmup_parts(group).items():
        choices[label] = point_b_crit(part)
    return Spread(choices)
