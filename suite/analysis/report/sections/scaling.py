"""Scaling: throughput and efficiency against worker count, the step-time breakdown, their
table, findings and headline candidate."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dpsuite.analysis.report import data, render, studies
from dpsuite.analysis.report.plots import (
    HOLLOW,
    MARKERS,
    log2_axis,
    outside_legend,
    panel_grid,
    percent_axis,
    plain_log_axis,
    series_color,
    styled,
)
from dpsuite.analysis.report.scaling_validity import valid
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.text import ms, pct

TOPIC = "Scaling"
PLOTS = ("throughput", "efficiency", "step_time_breakdown")
# Headline candidate and its rank (see `headline`): the suite's second question, how far it
# scales and what limits it, after convergence's.
HEADLINE = {"scaling_limit": 30}


def section(context: studies.Context) -> Section:
    scaling = context.scaling
    part = Section()
    if not context.has_runs:
        return part
    part.findings += data.mixed_resources(context.tree.runs)
    if scaling.empty:
        return part
    part.candidate("scaling_limit", scaling_limit(scaling))
    base = int(scaling["base_workers"].min())
    counts = scaling.groupby("series")["runs"].sum()
    part.plot(
        "throughput",
        functools.partial(throughput_vs_workers, scaling),
        "Throughput vs workers",
        f"One panel per workload. Median measured samples/s of the complete DDP runs at each "
        f"worker count ({int(counts.sum())} runs; bars: 95 % bootstrap interval where a point "
        f"was repeated); dashed: ideal linear scaling from N={base}; hollow: oversubscribed "
        "(more worker threads than cores: the point measures contention).",
    )
    part.plot(
        "efficiency",
        functools.partial(efficiency_vs_workers, scaling),
        "Scaling efficiency vs workers",
        f"Throughput at N workers divided by N/{base} × the throughput at N={base}, one panel "
        "per workload. 100 % is perfect scaling; the dotted line marks 80 %; hollow: "
        "oversubscribed." + INVALID_LEFT_OUT * bool(len(valid(scaling)) < len(scaling)),
    )
    part.plot(
        "step_time_breakdown",
        functools.partial(step_time_breakdown, scaling),
        "Step-time breakdown",
        "Median step time split into compute (the step without gradient synchronisation or "
        "its wait for data), the wait for data where the runs measured it, exposed "
        "communication (the time the all-reduce adds) and the rest, one panel per "
        "series; the black tick is the total all-reduce time, part of which overlaps the "
        "backward pass; hatched: oversubscribed.",
    )
    part.findings += scaling_findings(scaling)
    part.tables.append(
        render.Table(
            "Scaling",
            scaling_table_for_report(scaling),
            "Medians over the runs of each point; 95 % CI: bootstrap interval of the median "
            "samples/s over repeated runs. Model TFLOP/s per device: FLOPs counted by PyTorch x "
            "samples/s per device; MFU against hardware.peak_tflops where given; peak RSS: the "
            "largest rank's resident memory. oversubscribed: more worker threads than cores, "
            "so the point measures contention.",
        )
    )
    return part


INVALID_LEFT_OUT = " Points the findings call invalid are left out."


def interval_text(low: float, high: float) -> str:
    return "" if pd.isna(low) or pd.isna(high) else f"{low:,.0f}–{high:,.0f}"


def scaling_table_for_report(scaling: pd.DataFrame) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "series": scaling["series"],
            "workers": scaling["workers"],
            "runs": scaling["runs"],
            "samples_per_s": scaling["samples_per_s"],
            "samples_per_s_95%_CI": [
                interval_text(lo, hi)
                for lo, hi in zip(
                    scaling["samples_per_s_low"], scaling["samples_per_s_high"], strict=True
                )
            ],
            "efficiency_pct": 100 * scaling["efficiency"],
            "step_time_ms": 1e3 * scaling["step_time_s"],
            "data_wait_ms": 1e3 * scaling["data_wait_s"] if "data_wait_s" in scaling else None,
            "data_wait_pct": (
                100 * scaling["data_wait_share"] if "data_wait_share" in scaling else None
            ),
            "compute_ms": 1e3 * scaling["compute_time_s"],
            "exposed_comm_ms": 1e3 * scaling["exposed_comm_s"],
            "comm_ms": 1e3 * scaling["comm_time_s"],
            "tokens_per_s": scaling.get("tokens_per_s"),
            "model_TFLOP/s_per_device": scaling.get("model_tflops_per_device"),
            "MFU_pct": 100 * scaling["mfu"] if "mfu" in scaling else None,
            "peak_RSS_MiB": scaling.get("peak_rss_mib"),
            "peak_CUDA_MiB": scaling.get("peak_cuda_allocated_mib"),
            "oversubscribed": scaling["oversubscribed"].map({True: "yes", False: ""}),
            "valid": scaling["invalid"].map(lambda why: "invalid" if why else ""),
        }
    )
    if not scaling["invalid"].astype(bool).any():
        table = table.drop(columns="valid")
    if not scaling["samples_per_s_low"].notna().any():
        table = table.drop(columns="samples_per_s_95%_CI")
    if not scaling["oversubscribed"].any():
        table = table.drop(columns="oversubscribed")
    return table.dropna(axis=1, how="all")


class ScalingStyle:
    """Colour and marker of every scaling series, the same in every panel and figure.

    With several machines the colour is the machine (the thing being compared) and the marker
    the rest of the series (per-worker batch, precision, ...); with one machine the colour is
    that rest. Panels are workloads, so the workload is never in the legend.
    """

    def __init__(self, scaling: pd.DataFrame, machines: list[str] | None = None) -> None:
        rest = [k for k in data.SCALING_KEY if k not in ("machine", "workload")]
        self.variant = dict(
            zip(
                scaling["series"],
                data.series_labels(scaling, rest, always=["per_worker_batch"]),
                strict=True,
            )
        )
        self.machine = dict(zip(scaling["series"], scaling["machine"], strict=True))
        self.machines = machines or list(dict.fromkeys(scaling["machine"]))
        self.variants = list(dict.fromkeys(self.variant.values()))
        self.by_machine = len(self.machines) > 1

    def color(self, series: str) -> str:
        keys = self.machines if self.by_machine else self.variants
        value = self.machine[series] if self.by_machine else self.variant[series]
        return series_color(keys.index(value))

    def marker(self, series: str) -> str:
        if not self.by_machine:
            return "o"
        return MARKERS[self.variants.index(self.variant[series]) % len(MARKERS)]

    def legend(self, ideal: str | None, oversubscribed: bool) -> tuple[list, list[str]]:
        handles: list = []
        labels: list[str] = []
        if self.by_machine:
            for i, machine in enumerate(self.machines):
                handles.append(Line2D([], [], color=series_color(i), lw=3))
                labels.append(machine)
            for i, variant in enumerate(self.variants):
                marker = MARKERS[i % len(MARKERS)]
                handles.append(Line2D([], [], color="gray", marker=marker, ls=""))
                labels.append(variant)
        else:
            for i, variant in enumerate(self.variants):
                handles.append(Line2D([], [], color=series_color(i), marker="o"))
                labels.append(variant)
        if ideal:
            handles.append(Line2D([], [], color="gray", ls="--", alpha=0.7))
            labels.append(ideal)
        if oversubscribed:
            handles.append(Line2D([], [], color="gray", marker="o", ls="", **HOLLOW))
            labels.append("hollow: oversubscribed (more worker threads than cores)")
        return handles, labels


def plot_points(ax: Axes, x: pd.Series, y: pd.Series, over: pd.Series, color: str, marker: str):
    """A measured line; oversubscribed points hollow, so contention is not read as scaling."""
    ax.plot(x, y, "-", color=color)
    full, hollow = ~over.to_numpy(bool), over.to_numpy(bool)
    ax.plot(x[full], y[full], marker, ls="", color=color)
    ax.plot(x[hollow], y[hollow], marker, ls="", color=color, **HOLLOW)


def workload_panels(scaling: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return list(scaling.groupby("workload", sort=True))


@styled
def throughput_vs_workers(scaling: pd.DataFrame, machines: list[str] | None = None) -> Figure:
    """Measured samples/s against workers, one panel per workload, with the ideal linear line
    from the smallest N and the bootstrap interval of repeated points; ``machines`` orders the
    colours."""
    style = ScalingStyle(scaling, machines)
    panels = workload_panels(scaling)
    fig, axes = panel_grid(len(panels))
    for ax, (workload, runs) in zip(axes, panels, strict=True):
        for label, grp in runs.groupby("series", sort=False):
            c = style.color(label)
            ax.plot(grp["workers"], grp["ideal_samples_per_s"], "--", color=c, alpha=0.5, lw=1.2)
            low, high = grp["samples_per_s_low"], grp["samples_per_s_high"]
            if low.notna().any():
                spread = [grp["samples_per_s"] - low, high - grp["samples_per_s"]]
                ax.errorbar(
                    grp["workers"],
                    grp["samples_per_s"],
                    yerr=spread,
                    fmt="none",
                    ecolor=c,
                    capsize=3,
                    lw=1,
                )
            over = grp["oversubscribed"]
            plot_points(ax, grp["workers"], grp["samples_per_s"], over, c, style.marker(label))
        log2_axis(ax, runs["workers"])
        plain_log_axis(ax, "y")
        ax.set_title(workload)
        ax.set_xlabel("workers")
        ax.set_ylabel("samples/s (log scale)")
    base = int(scaling["base_workers"].min())
    repeated = scaling["samples_per_s_low"].notna().any()
    outside_legend(
        fig,
        *style.legend(f"ideal: linear from N={base}", bool(scaling["oversubscribed"].any())),
        title="median of repeats, bars: 95 % bootstrap interval" if repeated else None,
    )
    fig.suptitle("Training throughput vs workers")
    return fig


@styled
def efficiency_vs_workers(
    scaling: pd.DataFrame, machines: list[str] | None = None
) -> Figure | None:
    """Scaling efficiency tput(N) / (N/N0 · tput(N0)) in percent, one panel per workload; only
    the points that are valid (`scaling_validity`)."""
    style = ScalingStyle(scaling, machines)  # colours as in the throughput plot
    trusted = valid(scaling)
    if trusted.empty:
        return None
    panels = workload_panels(trusted)
    fig, axes = panel_grid(len(panels))
    top = max(110.0, float(100 * trusted["efficiency"].max()) * 1.08)
    for ax, (workload, runs) in zip(axes, panels, strict=True):
        ax.axhline(100, color="black", lw=1, ls="--")
        ax.axhline(100 * data.EFFICIENCY_THRESHOLD, color="gray", lw=1, ls=":")
        for label, grp in runs.groupby("series", sort=False):
            plot_points(
                ax,
                grp["workers"],
                100 * grp["efficiency"],
                grp["oversubscribed"],
                style.color(label),
                style.marker(label),
            )
        log2_axis(ax, runs["workers"])
        ax.set_ylim(0, top)
        percent_axis(ax)
        ax.set_title(workload)
        ax.set_xlabel("workers")
        ax.set_ylabel("scaling efficiency (%)")
    handles, labels = style.legend(None, bool(scaling["oversubscribed"].any()))
    handles += [
        Line2D([], [], color="black", lw=1, ls="--"),
        Line2D([], [], color="gray", lw=1, ls=":"),
    ]
    labels += ["ideal (100 %)", f"{100 * data.EFFICIENCY_THRESHOLD:.0f} %"]
    outside_legend(fig, handles, labels)
    base = int(scaling["base_workers"].min())
    ideal = "N × throughput(1)" if base == 1 else f"N/{base} × throughput({base})"
    fig.suptitle(f"Scaling efficiency: throughput(N) / ({ideal})")
    return fig


@styled
def step_time_breakdown(scaling: pd.DataFrame) -> Figure | None:
    """Stacked bars per worker count: compute, the wait for the slowest rank and the wait for
    data where measured, exposed communication, the rest of the step; one panel per series."""
    have = scaling.dropna(subset=["step_time_s", "compute_time_s", "exposed_comm_s"])
    if have.empty:
        return None
    series = list(have.groupby("series", sort=False))
    fig, axes = panel_grid(len(series))
    any_over = False
    for ax, (label, grp) in zip(axes, series, strict=True):
        x = np.arange(len(grp))
        hatch = ["//" if o else "" for o in grp["oversubscribed"]]
        any_over |= bool(grp["oversubscribed"].any())
        top = breakdown_bars(ax, x, grp, {"edgecolor": "white", "lw": 0, "hatch": hatch})
        comm_ms = 1e3 * grp["comm_time_s"].fillna(0).to_numpy()
        tallest = float(np.nanmax(np.concatenate([top, comm_ms])))
        ax.set_ylim(0, 1.08 * tallest)
        if grp["comm_time_s"].notna().any():
            ax.plot(
                x,
                1e3 * grp["comm_time_s"],
                "k_",
                markersize=22,
                mew=2,
                label="all-reduce time (incl. overlapped)",
            )
        ax.set_xticks(x, [str(int(w)) for w in grp["workers"]])
        ax.set_xlabel("workers")
        ax.set_ylabel("median step time (ms)")
        ax.set_title(label, fontsize=10)
        ax.grid(axis="x", visible=False)
    outside_legend(fig, *breakdown_legend(axes, any_over))
    fig.suptitle("Where a training step's time goes")
    return fig


def measured_ms(grp: pd.DataFrame, column: str) -> np.ndarray | None:
    """A column of the series in ms (missing values as 0), or None where no run measured it
    (older runs: their bars stay as they were drawn)."""
    values = 1e3 * grp.get(column, pd.Series(np.nan, grp.index)).to_numpy(float)
    return np.nan_to_num(values) if np.isfinite(values).any() else None


def breakdown_bars(ax: Axes, x: np.ndarray, grp: pd.DataFrame, bars: dict) -> np.ndarray:
    """One panel's stacked bars, bottom up; returns the height of the stacks."""
    compute = 1e3 * grp["compute_time_s"].to_numpy()
    exposed = 1e3 * grp["exposed_comm_s"].clip(lower=0).to_numpy()
    wait = measured_ms(grp, "straggler_wait_s")
    data_wait = measured_ms(grp, "data_wait_s")
    if wait is not None:  # the slowest rank's wait, measured apart from compute
        ax.bar(x, compute - wait, color="#1f77b4", label="compute (typical rank)", **bars)
        ax.bar(
            x, wait, bottom=compute - wait, color="#ff7f0e", label="waiting for slowest rank",
            **bars,
        )  # fmt: skip
    else:
        ax.bar(x, compute, color="#1f77b4", label="compute (no gradient sync)", **bars)
    bottom = compute
    if data_wait is not None:  # measured apart from compute: step = data wait + compute + exposed
        ax.bar(x, data_wait, bottom=bottom, color="#2ca02c", label=DATA_WAIT_LABEL, **bars)
        bottom = bottom + data_wait
    ax.bar(x, exposed, bottom=bottom, color="#d62728", label="exposed communication", **bars)
    rest = np.clip(1e3 * grp["step_time_s"].to_numpy() - bottom - exposed, 0, None)
    ax.bar(x, rest, bottom=bottom + exposed, color="#bbbbbb", label="rest of step", **bars)
    return bottom + exposed + rest


def breakdown_legend(axes, any_over: bool) -> tuple[list, list[str]]:
    """The first panel's parts, and the wait for data where any panel drew it: the stack
    from the bottom up, then the all-reduce tick."""
    found = dict(zip(*reversed(axes[0].get_legend_handles_labels()), strict=True))
    for ax in axes[1:]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label == DATA_WAIT_LABEL:
                found.setdefault(label, handle)
    labels = sorted(found, key=lambda lab: (lab.startswith("all-reduce"), PART_ORDER.get(lab, 9)))
    handles = [found[lab] for lab in labels]
    if any_over:
        handles.append(Patch(facecolor="#bbbbbb", edgecolor="white", hatch="//"))
        labels.append("hatched: oversubscribed (more worker threads than cores)")
    return handles, labels


DATA_WAIT_LABEL = "waiting for data"
PART_ORDER = {
    "compute (typical rank)": 0,
    "compute (no gradient sync)": 0,
    "waiting for slowest rank": 1,
    DATA_WAIT_LABEL: 2,
    "exposed communication": 3,
    "rest of step": 4,
}


def scaling_findings(scaling: pd.DataFrame) -> list[str]:
    """Per series: how far its throughput goes and where its efficiency stays above the
    threshold, or why it is invalid; then its exposed communication."""
    out = []
    for label, grp in scaling.groupby("series", sort=False):
        grp = grp.sort_values("workers")
        trusted = valid(grp)
        if trusted.empty or trusted.iloc[0]["workers"] != grp.iloc[0]["workers"]:
            out.append(invalid_series(label, grp))
        else:
            out += efficiency_findings(label, trusted)
            out += [
                f"{label}: invalid point, left out of the efficiency findings, plot and "
                f"headline: {why}."
                for why in grp["invalid"]
                if why
            ]
        out.extend(communication_findings(label, grp))
        out.extend(input_findings(label, grp))
    return out


def input_findings(label: str, grp: pd.DataFrame) -> list[str]:
    """The wait for data at the largest worker count that measured it (runs from before it
    was measured say nothing); input-bound from ``data.INPUT_BOUND_SHARE`` of the step up."""
    if "data_wait_share" not in grp:
        return []
    have = grp.dropna(subset=["data_wait_share", "step_time_s"])
    if have.empty:
        return []
    row = have.iloc[-1]
    n, share = int(row["workers"]), float(row["data_wait_share"])
    waited = f"{pct(share, 0)} of the step waits for data at {n} worker{'s' if n > 1 else ''}"
    if pd.notna(row.get("data_wait_s")):
        waited += f" ({ms(row['data_wait_s'])} of {ms(row['step_time_s'])} per median step)"
    if share >= data.INPUT_BOUND_SHARE:
        return [
            f"{label}: input-bound: {waited}; more loader workers (data.loader_workers) or a "
            "faster input pipeline would speed it up."
        ]
    return [f"{label}: not input-bound: {waited} (below {pct(data.INPUT_BOUND_SHARE, 0)})."]


def invalid_series(label: str, grp: pd.DataFrame) -> str:
    """A series whose baseline cannot be trusted: what it measured, and why none of its
    efficiencies is given."""
    first, last = grp.iloc[0], grp.iloc[-1]
    n0, n = int(first["workers"]), int(last["workers"])
    return (
        f"{label}: invalid as a scaling series, so none of its efficiencies is used (nor in the "
        f"headline): {grp['invalid'].iloc[0]}. Measured: {first['samples_per_s']:,.0f} "
        f"samples/s on {n0} worker{'s' if n0 > 1 else ''}, {last['samples_per_s']:,.0f} on {n}."
    )


def efficiency_findings(label: str, grp: pd.DataFrame) -> list[str]:
    """How far a valid series' throughput goes, and its largest worker count that scales well."""
    first, last = grp.iloc[0], grp.iloc[-1]
    n0, n = int(first["workers"]), int(last["workers"])
    speedup = last["samples_per_s"] / first["samples_per_s"]
    out = [
        f"{label}: throughput goes from {first['samples_per_s']:,.0f} samples/s on "
        f"{n0} worker{'s' if n0 > 1 else ''} to {last['samples_per_s']:,.0f} samples/s on "
        f"{n} workers, {speedup:.2f}× the speed ({pct(last['efficiency'], 0)} scaling "
        "efficiency)."
    ]
    more = grp[grp["workers"] > n0]
    if more.empty:
        return out
    good = more[more["efficiency"] >= data.EFFICIENCY_THRESHOLD]
    if good.empty:
        best = more.loc[more["efficiency"].idxmax()]
        out.append(
            f"{label}: no worker count above {n0} reaches {pct(data.EFFICIENCY_THRESHOLD, 0)} "
            f"scaling efficiency (best: {pct(best['efficiency'], 0)} at "
            f"{int(best['workers'])} workers)."
        )
    else:
        k = good.loc[good["workers"].idxmax()]
        out.append(
            f"{label}: largest worker count with ≥ {pct(data.EFFICIENCY_THRESHOLD, 0)} scaling "
            f"efficiency: {int(k['workers'])} ({pct(k['efficiency'], 0)})."
        )
    return out


def communication_findings(label: str, grp: pd.DataFrame) -> list[str]:
    """Exposed communication at the largest worker count that has it measured."""
    have = grp.dropna(subset=["exposed_comm_s", "step_time_s"])
    have = have[have["workers"] > 1]
    if have.empty:
        return []
    row = have.iloc[-1]
    n, step, exposed = int(row["workers"]), row["step_time_s"], row["exposed_comm_s"]
    if exposed <= 0:  # a step with gradient sync measured no slower than one without
        return [f"{label}: no measurable exposed communication at {n} workers."]
    sentence = (
        f"{label}: exposed communication is {pct(exposed / step)} of step time at {n} workers "
        f"({1e3 * exposed:.2f} of {1e3 * step:.2f} ms)"
    )
    wait = row.get("straggler_wait_s")
    if pd.notna(wait) and wait > 0:
        sentence += f"; waiting for the slowest rank adds {1e3 * wait:.2f} ms more"
    comm = row.get("comm_time_s")
    if pd.notna(comm) and comm > 0 and exposed > comm:
        # More exposed than the whole all-reduce: the difference is no communication.
        sentence += (
            f"; that is more than the whole {1e3 * comm:.2f} ms all-reduce, so "
            f"{1e3 * (exposed - comm):.2f} ms of it is not the all-reduce (compute slowed while "
            "it runs, or ranks out of step)"
        )
    elif pd.notna(comm) and comm > 0:
        hidden = min(max(1 - exposed / comm, 0.0), 1.0)
        sentence += (
            f"; {pct(hidden, 0)} of the {1e3 * comm:.2f} ms all-reduce is hidden behind compute"
        )
    return [sentence + "."]


def scaling_limit(scaling: pd.DataFrame) -> str | None:
    """Best and worst efficiency at the largest worker count that was not oversubscribed, and
    the step time each spends computing and waiting for the all-reduce."""
    trusted = valid(scaling)
    if trusted.empty:
        return None
    more = trusted[trusted["workers"] > trusted["base_workers"]]
    if more.empty:
        return None
    fair = more[~more["oversubscribed"]]
    pick = fair if len(fair) else more
    n = int(pick["workers"].max())
    at = pick[pick["workers"] == n]
    best = at.loc[at["efficiency"].idxmax()]
    worst = at.loc[at["efficiency"].idxmin()]
    sentence = (
        f"At {n} workers {best['series']} reaches {pct(best['efficiency'], 0)} scaling "
        f"efficiency{step_parts(best)}"
    )
    if len(at) > 1:
        sentence += (
            f"; {worst['series']} only {pct(worst['efficiency'], 0)}"
            f"{step_parts(worst, per_step='')}" + limited_by(best, worst)
        )
    sentence += input_bound(at, n)
    crowded = sorted(int(w) for w in more[more["oversubscribed"]]["workers"].unique())
    if crowded and len(fair):
        counts = ", ".join(map(str, crowded))
        sentence += (
            f"; runs at {counts} workers had more worker threads than cores (oversubscribed, "
            "drawn hollow) and measure contention"
        )
    elif crowded:
        sentence += "; these runs had more worker threads than cores and measure contention"
    return sentence + "."


def input_bound(at: pd.DataFrame, n: int) -> str:
    """The series at ``n`` workers whose step waits for data (those that measured it)."""
    if "data_wait_share" not in at:
        return ""
    bound = at[at["data_wait_share"] >= data.INPUT_BOUND_SHARE]
    return "".join(
        f"; {row['series']} is input-bound: {pct(row['data_wait_share'], 0)} of the step waits "
        f"for data at {n} workers"
        for _, row in bound.iterrows()
    )


def step_parts(row: pd.Series, per_step: str = " per step") -> str:
    if pd.isna(row["compute_time_s"]) or pd.isna(row["exposed_comm_s"]):
        return ""
    return (
        f" ({ms(row['compute_time_s'])} of compute and {ms(max(row['exposed_comm_s'], 0))} of "
        f"exposed all-reduce{per_step})"
    )


def limited_by(best: pd.Series, worst: pd.Series) -> str:
    """Why the worst series scales worse, when the step-time split says so."""
    try:
        worst_share = worst["exposed_comm_s"] / worst["step_time_s"]
        best_share = best["exposed_comm_s"] / best["step_time_s"]
    except (TypeError, ZeroDivisionError):
        return ""
    if pd.isna(worst_share) or pd.isna(best_share) or worst_share <= best_share:
        return ""
    return ": its compute is too short to hide the all-reduce behind"
