"""B_crit against the target, with B_simple near each target beside it: McCandlish et al.
(2018) find both growing as the target gets harder."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dpsuite.analysis.report import target_study
from dpsuite.analysis.report.plots import FIT_COLOR, styled

NEAR_COLOR = "#2ca02c"  # B_simple near the target, as in the critical-batch plot
CAPTION = (
    "Purple: B_crit = E_min / S_min fitted at each target (bars: its interval, over seeds or, "
    "where seeds cannot vary it, the evaluations' granularity); green: B_simple near each "
    "target (bars: 95 % bootstrap interval of the median over the LR oracle's runs). Harder "
    "targets to the right; a target without a point had fewer than 3 tuned batches reaching it "
    "(B_crit) or no noise-scale window before it (B_simple)."
)


def points(table: pd.DataFrame, value: str, low: str, high: str) -> pd.DataFrame:
    """The finite values of one series, with its bars' lengths below and above (0 where the
    interval is not finite)."""
    rows = table[np.isfinite(table[value].to_numpy(float))]
    lo = (rows[value] - rows[low]).where(np.isfinite(rows[low]), 0.0).clip(lower=0)
    hi = (rows[high] - rows[value]).where(np.isfinite(rows[high]), 0.0).clip(lower=0)
    return pd.DataFrame({"target": rows["target"], "value": rows[value], "lo": lo, "hi": hi})


@styled
def by_target(table: pd.DataFrame, metric: str, title: str) -> Figure | None:
    """B_crit and B_simple (log axis) against the target, harder to the right."""
    if not worth_drawing(table):
        return None
    crit = points(table, "b_crit", "low", "high")
    near = points(table, "b_simple", "b_simple_low", "b_simple_high")
    loss = metric == target_study.LOSS
    scale = 1.0 if loss else 100.0
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    spacing = float(np.diff(sorted(table["target"])).min()) * scale if len(table) > 1 else 1.0
    for frame, color, label, shift in (
        (crit, FIT_COLOR, "B_crit = E_min / S_min (fitted)", -0.08),
        (near, NEAR_COLOR, "B_simple near the target", 0.08),
    ):
        if frame.empty:
            continue
        x = frame["target"] * scale + (-shift if loss else shift) * spacing
        ax.errorbar(
            x,
            frame["value"],
            yerr=[frame["lo"], frame["hi"]],
            fmt="o-",
            color=color,
            capsize=3,
            label=label,
        )
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    if loss:
        ax.invert_xaxis()  # a lower loss is the harder target
    ax.set_xlabel("target eval loss (nats)" if loss else "target validation accuracy (%)")
    ax.set_ylabel("global batch (samples)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    return fig


def worth_drawing(table: pd.DataFrame) -> bool:
    """Two targets or more with a B_crit or a B_simple."""
    finite = [
        math.isfinite(b) or math.isfinite(s)
        for b, s in zip(table["b_crit"], table.get("b_simple", table["b_crit"]), strict=True)
    ]
    return sum(finite) >= 2
