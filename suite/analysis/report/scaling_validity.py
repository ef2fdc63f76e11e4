"""Scaling points that cannot be true, caught before a finding or the headline uses them.

* More than 100 % scaling efficiency beyond its interval: the smallest worker count (the
  baseline every efficiency of its series is relative to) ran slower per worker than a larger
  one, which adding workers to data-parallel training cannot do; the baseline was slowed (a
  busy machine, oversubscribed threads) and every efficiency of its series with it. With
  repeats the whole 95 % interval must be above 100 %; a single run is allowed `SUPERLINEAR`.
* A run that counts more samples than it had: steps × global batch above the training samples
  of the epochs those steps cover (its samples/s counts samples it never processed).

A series with an invalid baseline is invalid at every point; an invalid larger point only there.
"""

from __future__ import annotations

import math

import pandas as pd

from dpsuite.analysis.report.text import pct

SUPERLINEAR = 1.10  # a single run's efficiency above this points at a slow baseline, not at magic


def _number(runs: pd.DataFrame, column: str) -> pd.Series:
    if column not in runs.columns:
        return pd.Series(math.nan, index=runs.index)
    return pd.to_numeric(runs[column], errors="coerce")


def sample_shortfall(runs: pd.DataFrame) -> pd.Series:
    """Per run, why it counted more samples than it had ("" where it did not, or cannot tell)."""
    steps, batch = _number(runs, "steps"), _number(runs, "global_batch")
    have, per_epoch = _number(runs, "train_samples"), _number(runs, "steps_per_epoch")
    epochs = (steps / per_epoch).apply(_ceil).fillna(_number(runs, "epochs"))
    out = pd.Series("", index=runs.index, dtype=object)
    short = (steps * batch > have * epochs.clip(lower=1)) & have.gt(0)
    for i in runs.index[short.fillna(False)]:
        out[i] = (
            f"{int(steps[i]):,} steps × global batch {int(batch[i]):,} = "
            f"{int(steps[i] * batch[i]):,} samples, more than the {int(have[i]):,} training "
            f"samples of the {int(max(epochs[i], 1))} epoch(s) those steps cover"
        )
    return out


def _ceil(value: float) -> float:
    return float(math.ceil(value)) if math.isfinite(value) else math.nan


def superlinear(row: pd.Series) -> bool:
    """Efficiency above 100 % beyond what the repeats' interval (or one run's noise) allows."""
    if row["workers"] <= row["base_workers"]:
        return False
    low = row.get("efficiency_low", math.nan)
    return bool(low > 1) if pd.notna(low) else bool(row["efficiency"] > SUPERLINEAR)


def superlinear_reason(base: pd.Series, row: pd.Series) -> str:
    n0, n = int(base["workers"]), int(row["workers"])
    low, high = row.get("efficiency_low", math.nan), row.get("efficiency_high", math.nan)
    interval = f", 95 % interval {pct(low, 0)}–{pct(high, 0)}" if pd.notna(low) else ""
    return (
        f"at {n} workers its efficiency is {pct(row['efficiency'], 0)}{interval}, above 100 %: "
        f"the {n0}-worker baseline ran slower per worker "
        f"({base['samples_per_s'] / n0:,.0f} samples/s per worker) than {n} workers did "
        f"({row['samples_per_s'] / n:,.0f}), which adding workers cannot do; the baseline was "
        "slowed (a busy machine, or oversubscribed threads during it): rerun it"
    )


def judge(scaling: pd.DataFrame) -> pd.DataFrame:
    """The scaling table with ``invalid``: why a point cannot be trusted ("" where it can)."""
    scaling = scaling.copy()
    scaling["invalid"] = ""
    short = scaling.get("samples_short", pd.Series("", scaling.index)).fillna("")
    for _, grp in scaling.groupby("series", sort=False):
        grp = grp.sort_values("workers")
        base = grp.iloc[0]
        above = grp[[superlinear(row) for _, row in grp.iterrows()]]
        whole = []  # what makes the baseline, and so every point, untrustworthy
        if len(above):
            whole.append(superlinear_reason(base, above.loc[above["efficiency"].idxmax()]))
        if short[base.name]:
            whole.append(f"its {int(base['workers'])}-worker baseline counted {short[base.name]}")
        if whole:
            scaling.loc[grp.index, "invalid"] = "; ".join(whole)
            continue
        for i in grp.index[short[grp.index].astype(bool)]:
            scaling.loc[i, "invalid"] = (
                f"at {int(grp.loc[i, 'workers'])} workers a run counted {short[i]}"
            )
    return scaling


def valid(scaling: pd.DataFrame) -> pd.DataFrame:
    """The points a finding may call a result and the headline may choose from."""
    if scaling.empty or "invalid" not in scaling.columns:
        return scaling
    return scaling[scaling["invalid"].eq("")]
