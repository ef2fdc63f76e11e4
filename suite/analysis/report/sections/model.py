"""The scaling model (`dpsuite.analysis.scaling`) fitted to a report's results: predicted against
measured throughput, its validation table and findings."""

from __future__ import annotations

import functools

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dpsuite.analysis import scaling
from dpsuite.analysis.report import render, studies
from dpsuite.analysis.report.plots import log2_axis, plain_log_axis, series_color, styled
from dpsuite.analysis.report.section import Section

TOPIC = "Scaling model"
PLOTS = ("scaling_model",)
HEADLINE: dict[str, int] = {}  # no headline candidate


def section(context: studies.Context) -> Section:
    """The scaling model fitted to these results, beside the measured points."""
    fits = context.fits
    part = Section()
    curves, validation = [], []
    machines = len({fit.hardware for fit in fits})
    for fit in fits:
        if fit.validation.empty:
            continue
        for batch in sorted(fit.validation["per_worker_batch"].unique()):
            label = f"{fit.workload}, b={batch}" + (f" ({fit.hardware})" if machines > 1 else "")
            curves.append(
                fit.model.predict(scaling.DEFAULT_WORKERS, int(batch)).assign(series=label)
            )
            val = fit.validation[fit.validation["per_worker_batch"] == batch]
            validation.append(
                val.assign(
                    series=label, samples_per_s=val["workers"] * batch / val["measured_step_s"]
                )
            )
    if not curves:
        return part
    table = pd.concat(validation, ignore_index=True)
    # Two decimals: a fit that passes through a point leaves a rounding residue (1e-14) whose
    # digits differ between CPUs, and the report must not.
    table["error_pct"] = table["error_pct"].round(2) + 0.0
    validated = sorted({fit.model.validated_max for fit in fits})
    one_node = all(fit.model.topology.nodes(max(scaling.DEFAULT_WORKERS)) == 1 for fit in fits)
    part.plot(
        "scaling_model",
        functools.partial(model_vs_measured, pd.concat(curves), table),
        "Scaling model: predicted vs measured throughput",
        "Step time = compute (workers=1 runs, linear in batch) + the all-reduce time DDP's bucket "
        "schedule leaves exposed after the backward pass (fastest of ring, tree and hierarchical "
        "all-reduce on the links fitted to comm-bench); throughput = N × b / step time. "
        f"Validated against measurements up to {' / '.join(map(str, validated))} workers "
        "(runs with more worker threads than cores left out): solid there, dashed and labelled "
        "extrapolation beyond"
        + (
            "; no comm-bench spanned two nodes, so the extrapolation keeps every rank on the "
            "link measured inside this one."
            if one_node
            else "."
        )
        + " `dpsuite predict` prints the fitted parameters.",
    )
    part.findings += model_findings(table)
    part.tables.append(
        render.Table(
            "Scaling model validation",
            table[["series", "workers", "measured_step_s", "predicted_step_s", "error_pct"]],
            "Predicted against measured median step time at every measured worker count.",
        )
    )
    return part


@styled
def model_vs_measured(curves: pd.DataFrame, measured: pd.DataFrame) -> Figure | None:
    """Predicted throughput per series, solid up to the largest validated worker count and dashed
    (extrapolation) beyond, with the measured points on top and the validated limit marked."""
    if curves.empty:
        return None
    fig = Figure(figsize=(9, 4.6))
    ax = fig.add_subplot()
    limits = set()
    for i, (label, grp) in enumerate(curves.groupby("series", sort=True)):
        color = series_color(i)
        grp = grp.sort_values("workers")
        inside = grp[~grp["extrapolated"]]
        limits.add(int(inside["workers"].max()) if len(inside) else 1)
        # the dashed part starts at the last validated point so the line is continuous
        outside = grp[grp["workers"] >= inside["workers"].max()] if len(inside) else grp
        ax.plot(inside["workers"], inside["samples_per_s"], color=color, label=label)
        ax.plot(outside["workers"], outside["samples_per_s"], color=color, linestyle="--")
        pts = measured[measured["series"] == label]
        crowded = pts.get("oversubscribed", pd.Series(False, index=pts.index)).astype(bool)
        ax.plot(
            pts.loc[~crowded, "workers"],
            pts.loc[~crowded, "samples_per_s"],
            "o",
            color=color,
            markeredgecolor="black",
        )
        ax.plot(
            pts.loc[crowded, "workers"],
            pts.loc[crowded, "samples_per_s"],
            "o",
            markerfacecolor="none",
            markeredgecolor=color,
        )
    mark_limits(ax, sorted(limits))
    log2_axis(ax, curves["workers"])
    plain_log_axis(ax, "y")
    ax.set_xlabel("workers (log2)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title("Scaling model: predicted vs measured throughput")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


def mark_limits(ax: Axes, limits: list[int]) -> None:
    """A dotted line at each validated limit, and a legend of what lines and markers mean."""
    for limit in limits:
        ax.axvline(limit, color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            f"validated up to {limit} workers; extrapolation beyond →",
            (limit, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -2),
            textcoords="offset points",
            va="top",
            fontsize=8,
            color="dimgrey",
        )
    # One entry per series, then what line and marker mean (a legend of 2 x series entries
    # would cover the curves).
    ax.plot([], [], color="grey", label="model, validated range")
    ax.plot([], [], color="grey", linestyle="--", label="model, extrapolation")
    ax.plot([], [], "o", color="grey", markeredgecolor="black", label="measured")
    ax.plot(
        [],
        [],
        "o",
        markerfacecolor="none",
        markeredgecolor="grey",
        label="measured, oversubscribed",
    )


def model_findings(validation: pd.DataFrame) -> list[str]:
    """How far the validation reached, and the model's step-time error per worker count."""
    multi = validation[validation["workers"] > 1].reset_index(drop=True)
    crowded_rows = multi.get("oversubscribed", pd.Series(False, index=multi.index)).astype(bool)
    reached = multi.loc[~crowded_rows, "workers"]
    out = [
        f"The scaling model is validated against measurements up to "
        f"{int(reached.max()) if len(reached) else 1} workers"
        + (" (runs with more worker threads than cores left out)" if crowded_rows.any() else "")
        + "; its predictions beyond are extrapolation."
    ]
    for workers, grp in multi.groupby("workers", sort=True):
        worst = grp.loc[grp["error_pct"].abs().idxmax()]
        crowded = bool(grp.get("oversubscribed", pd.Series(dtype=bool)).any())
        out.append(
            f"At {int(workers)} workers the scaling model's step time is within "
            f"{abs(worst['error_pct']):.0f} % of the measured one (worst: {worst['series']}, "
            f"{worst['error_pct']:+.0f} %)"
            + (
                "; these runs had more worker threads than cores, which the model, fitted to "
                "one worker's compute, does not know about."
                if crowded
                else "."
            )
        )
    return out
