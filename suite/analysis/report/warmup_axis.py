"""Warmup as its own axis of the LR oracle: per global batch, the best setting with warmup and
the best without, so that the oracle's choice between them is shown, not made silently.

At the base batch the base-LR runs count as both (warmup from the base LR to itself changes
nothing).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dpsuite.analysis.report import target_study

COLUMNS = [
    "global_batch",
    "steps_without",
    "lr_without",
    "steps_with",
    "lr_with",
    "with_over_without",
]


def setting_warmup(group: pd.DataFrame) -> dict[str, bool | None]:
    """Per setting name: whether its runs warm up (None for the base setting: both)."""
    runs = target_study.finished_runs(group)
    warm = runs["warmup_epochs"].fillna(0).astype(float) > 0
    flags = warm.groupby(runs["setting"]).any()
    out: dict[str, bool | None] = {str(k): bool(v) for k, v in flags.items()}
    out[target_study.BASE_SETTING] = None
    return out


def best_of(settings: pd.DataFrame) -> tuple[float, float]:
    """(steps, peak LR) of the fewest-steps setting; (inf, NaN) where none reached it."""
    if settings.empty or not np.isfinite(settings["steps"]).any():
        return math.inf, math.nan
    row = settings.loc[settings["steps"].idxmin()]
    return float(row["steps"]), float(row["peak_lr"])


def warmup_oracle(group: pd.DataFrame, settings: pd.DataFrame) -> pd.DataFrame:
    """Per batch: the best steps and peak LR without warmup and with it, and their ratio; empty
    where the group has settings of one kind only."""
    flags = setting_warmup(group)
    kinds = settings["setting"].map(flags)
    # None (the base setting) is both kinds
    warm_only, cold_only = kinds.map(lambda k: k is True), kinds.map(lambda k: k is False)
    if not (warm_only.any() and cold_only.any()):
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for batch, grp in settings.groupby("global_batch", sort=True):
        without = best_of(grp[~warm_only[grp.index]])
        warm = best_of(grp[~cold_only[grp.index]])
        ratio = warm[0] / without[0] if math.isfinite(without[0]) else math.nan
        rows.append([int(batch), *without, *warm, ratio])
    return pd.DataFrame(rows, columns=COLUMNS)
