"""One function per plot. Each takes tables from `suite.analysis.report.data` and returns a Figure.

Figures are built with matplotlib's object API on the Agg backend (no display, no global pyplot
state) and share one style: labelled axes with units, log2 axes for workers and batch sizes, and
one colour per LR rule that is the same in every plot.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from suite.analysis.report import critical_batch as cb  # noqa: E402
from suite.analysis.report import data  # noqa: E402
from suite.optim.lr_rules import RULES  # noqa: E402
from suite.results import owned  # noqa: E402

DPI = 110
STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 6,
}
RULE_COLORS = {name: rule.color for name, rule in RULES.items() if rule.color}
SERIES_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
MARKERS = ["o", "s", "^", "D", "v", "P"]
LINESTYLES = ["-", "--", ":", "-."]
HOLLOW = {"markerfacecolor": "white", "markeredgewidth": 1.5}
MAX_COLUMNS = 3  # panels per row: three fit the page width at a readable size
PANEL_WIDTH, PANEL_HEIGHT = 4.0, 3.2  # inches
DIVERGED_MARKER = {
    "marker": "X",
    "markersize": 10,
    "markeredgecolor": "black",
    "linestyle": "",
    "clip_on": False,
}


def styled(plot: Callable[..., Figure | None]) -> Callable[..., Figure | None]:
    """Build the figure under the shared style."""

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            return plot(*args, **kwargs)

    return wrapper


def save(fig: Figure, path: Path) -> None:
    """The PNG at ``path`` and an SVG beside it (same stem), byte for byte the same from the
    same results: no creation date, and SVG ids from a fixed salt (a committed report changes
    only where its numbers do)."""
    png, svg = io.BytesIO(), io.BytesIO()  # rendered first: a full disk never gets half
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    with matplotlib.rc_context({"svg.hashsalt": "dpsuite"}):
        fig.savefig(
            svg, format="svg", bbox_inches="tight", facecolor="white", metadata={"Date": None}
        )
    owned.write(path, png.getvalue())
    owned.write(path.with_suffix(".svg"), svg.getvalue())


def rule_color(rule: str) -> str:
    return RULE_COLORS.get(rule, "#7f7f7f")


def series_color(i: int) -> str:
    return SERIES_COLORS[i % len(SERIES_COLORS)]


def log2_axis(ax: Axes, values: Iterable[float], axis: str = "x") -> None:
    """A base-2 log axis with a tick (as a plain number) at every measured value."""
    ticks = sorted({float(v) for v in values if v and np.isfinite(v)})
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_major_locator(ticker.FixedLocator(ticks))
    target.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_locator(ticker.NullLocator())
    if len(ticks) == 1:  # one value: give the axis some room around it
        (ax.set_xlim if axis == "x" else ax.set_ylim)(ticks[0] / 1.5, ticks[0] * 1.5)


def plain_log_axis(ax: Axes, axis: str = "y") -> None:
    """A base-10 log axis labelled 1, 2, 3, 5 per decade as plain numbers (no 10^k)."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    target.set_major_formatter(ticker.FuncFormatter(plain_number))
    target.set_minor_locator(ticker.NullLocator())


def plain_number(v: float, _pos=None) -> str:
    """1,000,000 rather than 1e+06; small values keep three significant digits."""
    return f"{v:,.0f}" if v >= 1 else f"{v:.3g}"


def approx(value: float) -> str:
    """Two significant digits with thousands separators: 188.4 -> 190, 1,312 -> 1,300."""
    rounded = float(f"{value:.2g}")
    return f"{rounded:,.0f}" if rounded >= 10 else f"{rounded:g}"


def human_bytes(n: float) -> str:
    """Binary units, three significant digits: 315,432 -> 308 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def percent_axis(ax: Axes) -> None:
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def accuracy_axis(ax: Axes, min_span: float = 10.0) -> None:
    """Percent labels, and at least ``min_span`` points of range so noise is not magnified."""
    percent_axis(ax)
    lo, hi = ax.get_ylim()
    if hi - lo < min_span:
        mid = (lo + hi) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
        shift = max(0.0, -lo) - max(0.0, hi - 100.0)
        ax.set_ylim(lo + shift, hi + shift)


# ---- 1-4: scaling and the all-reduce ---------------------------------------------------------


def panel_grid(n: int) -> tuple[Figure, list[Axes]]:
    """``n`` panels wrapped into rows of at most ``MAX_COLUMNS``, readable at page width."""
    cols = min(MAX_COLUMNS, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(PANEL_WIDTH * cols, PANEL_HEIGHT * rows + 0.8), layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def outside_legend(fig: Figure, handles: list, labels: list[str], title: str | None = None):
    """One legend for all panels, below them: never on top of the data."""
    cols = min(len(labels), 4)
    fig.legend(handles, labels, loc="outside lower center", ncols=cols, title=title)


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
def efficiency_vs_workers(scaling: pd.DataFrame, machines: list[str] | None = None) -> Figure:
    """Scaling efficiency tput(N) / (N/N0 · tput(N0)) in percent, one panel per workload."""
    style = ScalingStyle(scaling, machines)
    panels = workload_panels(scaling)
    fig, axes = panel_grid(len(panels))
    top = max(110.0, float(100 * scaling["efficiency"].max()) * 1.08)
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
    """Stacked bars per worker count: compute, exposed communication, the rest of the step;
    one panel per series, wrapped."""
    have = scaling.dropna(subset=["step_time_s", "compute_time_s", "exposed_comm_s"])
    if have.empty:
        return None
    series = list(have.groupby("series", sort=False))
    fig, axes = panel_grid(len(series))
    any_over = False
    for ax, (label, grp) in zip(axes, series, strict=True):
        x = np.arange(len(grp))
        compute = 1e3 * grp["compute_time_s"].to_numpy()
        exposed = 1e3 * grp["exposed_comm_s"].clip(lower=0).to_numpy()
        rest = np.clip(1e3 * grp["step_time_s"].to_numpy() - compute - exposed, 0, None)
        hatch = ["//" if o else "" for o in grp["oversubscribed"]]
        any_over |= bool(grp["oversubscribed"].any())
        bars = {"edgecolor": "white", "lw": 0, "hatch": hatch}
        wait = 1e3 * grp.get("straggler_wait_s", pd.Series(np.nan, grp.index)).to_numpy(float)
        if np.isfinite(wait).any():  # the slowest rank's wait, measured apart from compute
            wait = np.nan_to_num(wait)
            ax.bar(x, compute - wait, color="#1f77b4", label="compute (typical rank)", **bars)
            ax.bar(
                x, wait, bottom=compute - wait, color="#ff7f0e", label="waiting for slowest rank",
                **bars,
            )  # fmt: skip
        else:
            ax.bar(x, compute, color="#1f77b4", label="compute (no gradient sync)", **bars)
        ax.bar(x, exposed, bottom=compute, color="#d62728", label="exposed communication", **bars)
        ax.bar(x, rest, bottom=compute + exposed, color="#bbbbbb", label="rest of step", **bars)
        comm_ms = 1e3 * grp["comm_time_s"].fillna(0).to_numpy()
        tallest = float(np.nanmax(np.concatenate([compute + exposed + rest, comm_ms])))
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
    handles, labels = axes[0].get_legend_handles_labels()
    # the stack from the bottom up, then the all-reduce tick (matplotlib lists lines first)
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("all-reduce"))
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    if any_over:
        handles.append(Patch(facecolor="#bbbbbb", edgecolor="white", hatch="//"))
        labels.append("hatched: oversubscribed (more worker threads than cores)")
    outside_legend(fig, handles, labels)
    fig.suptitle("Where a training step's time goes")
    return fig


@styled
def allreduce_bandwidth(comm: pd.DataFrame, machines: list[str] | None = None) -> Figure | None:
    """busbw and algbw against message size, one line per collective and benchmark; colour: the
    collective when there are several, else the machine (or rank count on one machine)."""
    if comm.empty:
        return None
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    keys = ["collective", "machine", "world_size", "backend", "bench_id"]
    collectives = list(dict.fromkeys(comm["collective"]))
    machines = machines or list(dict.fromkeys(comm["machine"]))
    worlds = sorted(comm["world_size"].dropna().unique())
    by_machine = len(machines) > 1
    series = list(dict.fromkeys(zip(comm["machine"], comm["world_size"], strict=True)))
    for (collective, machine, world, backend, _bench), grp in comm.groupby(
        keys, dropna=False, sort=False
    ):
        grp = grp.sort_values("size_bytes")
        w = worlds.index(world) if world in worlds else len(worlds)
        if len(collectives) > 1:
            color = series_color(collectives.index(collective))
            line = LINESTYLES[series.index((machine, world)) % len(LINESTYLES)]
        else:
            color = series_color(machines.index(machine) if by_machine else w)
            line = LINESTYLES[w % len(LINESTYLES)] if by_machine else "-"
        over = grp.get("hardware.oversubscribed", pd.Series(False, index=grp.index)).eq(True)
        world_txt = f"{int(world)} ranks" if pd.notna(world) else "? ranks"
        label = f"{machine} · {world_txt} · {backend}" + (" (oversubscribed)" if over.any() else "")
        if len(collectives) > 1:
            label = f"{collective} · {label}"
        for ax, col in zip(axes, ("busbw_GBps", "algbw_GBps"), strict=True):
            ax.plot(
                grp["size_bytes"],
                grp[col],
                marker="o",
                ls=line,
                ms=3.5,
                color=color,
                label=label,
                **(HOLLOW if over.any() else {}),
            )
    sizes = sorted(comm["size_bytes"].unique())
    exps = sorted({int(round(math.log2(s))) for s in sizes if s > 0})
    step = max(1, math.ceil(len(exps) / 8))
    for ax, name in zip(
        axes, ("bus bandwidth (busbw)", "algorithm bandwidth (algbw)"), strict=True
    ):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(ticker.FixedLocator([2.0**e for e in exps[::step]]))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: human_bytes(v)))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.set_xlabel("message size")
        ax.set_ylabel(f"{name} (GB/s)")
        ax.set_ylim(bottom=0)
        ax.tick_params(axis="x", labelrotation=30)
    only_allreduce = collectives == ["all_reduce"]
    axes[0].set_title(
        "busbw = algbw × 2(n−1)/n (comparable across rank counts)"
        if only_allreduce
        else "busbw = algbw × the collective's factor (comparable across rank counts)"
    )
    axes[1].set_title("algbw = message size / time")
    title = "machine · ranks · backend"
    outside_legend(
        fig,
        *axes[0].get_legend_handles_labels(),
        title=title if only_allreduce else f"collective · {title}",
    )
    what = "All-reduce" if only_allreduce else "Collective"
    fig.suptitle(f"{what} bandwidth vs message size")
    return fig


# ---- 5-8: convergence --------------------------------------------------------------------------


@styled
def accuracy_vs_batch(
    group: pd.DataFrame, acc: pd.DataFrame, base: data.Baseline | None, title: str
) -> Figure:
    """Final test accuracy against global batch, one line per rule, seed spread as error bars."""
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    if base is not None:
        lo, hi = 100 * base.acc - 1, 100 * base.acc + 1
        ax.axhspan(lo, hi, color="gray", alpha=0.18, lw=0)
        ax.axhline(100 * base.acc, color="gray", lw=1)
    for rule in data.rule_order(acc["lr_rule"]):
        r = acc[(acc["lr_rule"] == rule) & acc["acc_mean"].notna()].sort_values("global_batch")
        if r.empty:
            continue
        ax.errorbar(
            r["global_batch"],
            100 * r["acc_mean"],
            yerr=100 * r["acc_std"],
            fmt="o-",
            capsize=3,
            color=rule_color(rule),
            label=rule,
        )
    joined = base is not None and from_baseline(acc, base, ax)
    div = group[group["status"] == "diverged"]
    for rule, grp in div.groupby("lr_rule"):
        ax.plot(
            grp["global_batch"],
            100 * grp["last_finite_acc"].fillna(0),
            color=rule_color(rule),
            **DIVERGED_MARKER,
        )
    log2_axis(ax, group["global_batch"])
    accuracy_axis(ax)
    handles, labels = ax.get_legend_handles_labels()
    if base is not None:
        handles.append(Patch(color="gray", alpha=0.3))
        labels.append(f"batch-{base.batch} baseline ± 1 point")
    if joined:
        handles.append(Line2D([], [], color="gray", ls=":"))
        labels.append(f"from the batch-{base.batch} run (the base LR under every rule)")
    if not div.empty:
        handles.append(Line2D([], [], color="gray", **DIVERGED_MARKER))
        labels.append("diverged (at last finite eval)")
    ax.legend(handles, labels, title="LR rule", loc="best")
    ax.set_xlabel("global batch (samples per step)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(title)
    return fig


def from_baseline(acc: pd.DataFrame, base: data.Baseline, ax: Axes) -> bool:
    """Dotted from the baseline point to each rule that was not run at the baseline batch: at
    that batch every rule gives the base LR, so a sweep may train it once. True if any drawn."""
    drawn = False
    for rule in data.rule_order(acc["lr_rule"]):
        r = acc[(acc["lr_rule"] == rule) & acc["acc_mean"].notna()].sort_values("global_batch")
        if r.empty or rule in data.OWN_RECIPE_RULES or r["global_batch"].iloc[0] <= base.batch:
            continue
        ax.plot(
            [base.batch, r["global_batch"].iloc[0]],
            [100 * base.acc, 100 * r["acc_mean"].iloc[0]],
            ":",
            color=rule_color(rule),
        )
        drawn = True
    return drawn


@styled
def training_curves(
    group: pd.DataFrame, epochs: dict[str, pd.DataFrame], batches: list[int], title: str
) -> Figure | None:
    """Test accuracy against epoch for each rule, one panel per global batch."""
    runs = data.one_run_per(group[group["global_batch"].isin(batches)], ["global_batch", "lr_rule"])
    if not any(len(epochs.get(r, ())) for r in runs["run_id"]):
        return None
    fig = Figure(figsize=(4.2 * len(batches), 4.2))
    axes = fig.subplots(1, len(batches), sharey=True, squeeze=False)[0]
    for ax, batch in zip(axes, batches, strict=True):
        at = runs[runs["global_batch"] == batch]
        for rule in data.rule_order(at["lr_rule"]):
            run = at[at["lr_rule"] == rule].iloc[0]
            ep = epochs.get(run["run_id"], pd.DataFrame())
            finite = (
                ep[np.isfinite(ep["eval_loss"]) & np.isfinite(ep["eval_acc"])] if len(ep) else ep
            )
            if finite.empty:
                continue
            ax.plot(
                finite["epoch"], 100 * finite["eval_acc"], "-", color=rule_color(rule), label=rule
            )
            if run["status"] == "diverged":
                ax.plot(
                    finite["epoch"].iloc[-1],
                    100 * finite["eval_acc"].iloc[-1],
                    color=rule_color(rule),
                    **DIVERGED_MARKER,
                )
        ax.set_title(f"global batch {batch}")
        ax.set_xlabel("epoch")
        if group["epochs"].notna().any():  # the planned budget: early ends stay visible
            ax.set_xlim(0, float(group["epochs"].max()))
    accuracy_axis(axes[0])
    axes[0].set_ylabel("test accuracy (%)")
    legend: dict[str, object] = {}
    for ax in axes:  # panels may hold different rules: one legend for all
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    if (runs["status"] == "diverged").any():
        legend["diverged"] = Line2D([], [], color="gray", **DIVERGED_MARKER)
    axes[0].legend(list(legend.values()), list(legend.keys()), title="LR rule")
    fig.suptitle(title)
    return fig


@styled
def lr_schedules(series: dict[str, pd.DataFrame], batch: int, warmup_end: float | None) -> Figure:
    """The learning rate each rule used, step by step, at one large global batch."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for rule in data.rule_order(series):
        s = series[rule]
        ax.plot(s["step"], s["lr"], "-", color=rule_color(rule), label=rule)
    if warmup_end:
        ax.axvline(warmup_end, color="gray", ls=":", lw=1)
        ax.annotate(
            "end of warmup",
            (warmup_end, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -12),
            textcoords="offset points",
            color="gray",
        )
    ax.set_ylim(bottom=0)
    ax.legend(title="LR rule")
    ax.set_xlabel("training step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"Learning rate by step at global batch {batch}")
    return fig


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
    for limit in sorted(limits):
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
    log2_axis(ax, curves["workers"])
    plain_log_axis(ax, "y")
    ax.set_xlabel("workers (log2)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title("Scaling model: predicted vs measured throughput")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return fig


# ---- 9-10: gradient noise scale and the critical batch ---------------------------------------


@styled
def noise_scale_over_training(
    curves: pd.DataFrame, rule: str, predicted: float | None, title: str
) -> Figure | None:
    """B_simple against epoch (log y), one line per global batch, seeds averaged."""
    if curves.empty:
        return None
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    seeds = curves.groupby("global_batch")["seeds"].max()
    same = seeds.nunique() == 1  # then the seed count goes in the legend title, once
    for i, (batch, grp) in enumerate(curves.groupby("global_batch", sort=True)):
        n = int(seeds[batch])
        label = f"{int(batch)}" + (f" (mean of {n} seeds)" if n > 1 and not same else "")
        ax.plot(
            grp["epoch"], grp["grad_noise_scale"], "o-", ms=4, color=series_color(i), label=label
        )
    if predicted is not None:
        # In the legend, not on the plot: a label by the line collides with the legend box.
        ax.axhline(
            predicted,
            color="black",
            ls=":",
            lw=1.2,
            label=f"predicted critical batch ≈ {approx(predicted)}",
        )
    plain_log_axis(ax, "y")
    ax.set_xlim(left=0)
    note = f", mean of {int(seeds.iloc[0])} seeds" if same and seeds.iloc[0] > 1 else ""
    # Beside the axes: one line per batch would hide some of the curves.
    ax.legend(
        title=f"global batch ({rule}{note})", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8
    )
    ax.set_xlabel("epoch")
    ax.set_ylabel("gradient noise scale B_simple (samples, log scale)")
    ax.set_title(title)
    return fig


# ---- 11-14: the steps-to-target study ---------------------------------------------------------

ORACLE_COLOR = "black"
ORACLE_LINE = {"lw": 6, "alpha": 0.3, "solid_capstyle": "round"}
NEVER_MARKER = {"marker": "^", "markersize": 9, "linestyle": "", "clip_on": False}


def draw_never(ax: Axes, never: list[tuple[float, str]], y: float) -> None:
    """Triangles at height ``y`` for the (batch, colour) of curves that never reach the target
    there, side by side where several miss at the same batch."""
    for batch in sorted({b for b, _ in never}):
        colors = [c for b, c in never if b == batch]
        for i, color in enumerate(colors):
            shift = i - (len(colors) - 1) / 2
            ax.plot([batch * 2 ** (0.08 * shift)], [y], color=color, **NEVER_MARKER)


def target_label(target: float, split: str = "test") -> str:
    return f"steps to reach {100 * target:g} % {split} accuracy (log scale)"


def steps_axes(ax: Axes, batches: Iterable[float], finite: pd.Series) -> float:
    """Log-log axes sized to the measured steps; returns the top, where 'never' is drawn."""
    log2_axis(ax, batches)
    top = 2.5 * float(finite.max())
    ax.set_ylim(0.5 * float(finite.min()), top)
    plain_log_axis(ax, "y")
    ax.set_xlabel("global batch (samples per step)")
    return top


def perfect_line(ax: Axes, knee: cb.Knee, xs: np.ndarray, twice: bool = False) -> None:
    ax.plot(xs, [knee.perfect(x) for x in xs], "k--", lw=1, label="perfect scaling (∝ 1/batch)")
    if twice:
        ax.plot(
            xs,
            [cb.KNEE_FACTOR * knee.perfect(x) for x in xs],
            ":",
            color="gray",
            lw=1.2,
            label=f"{cb.KNEE_FACTOR:g}× perfect",
        )


FIT_COLOR = "#9467bd"


@styled
def steps_to_target(
    rules: pd.DataFrame,
    best: pd.DataFrame,
    knee: cb.Knee | None,
    target: float,
    title: str,
    fit: cb.CriticalFit | None = None,
    split: str = "test",
) -> Figure | None:
    """Seed-median steps to target against global batch (log-log) per rule and for the LR
    oracle, with perfect scaling and the fitted S(B) = S_min + E_min / B; a median that is
    never (∞) is a triangle at the top."""
    finite = best[np.isfinite(best["steps"])]
    if finite.empty or best["global_batch"].nunique() < 2:
        return None
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    every = pd.concat([rules["steps"], best["steps"]])
    top = steps_axes(ax, best["global_batch"], every[np.isfinite(every)])
    # The oracle first, wide and pale: a rule that is the best LR somewhere runs along it.
    curves = [("LR oracle (fewest steps over the LRs tried)", best, ORACLE_COLOR, ORACLE_LINE)]
    curves += [
        (rule, rules[rules["lr_rule"] == rule], rule_color(rule), {"marker": "o", "ms": 5})
        for rule in data.rule_order(rules["lr_rule"])
    ]
    never: list[tuple[float, str]] = []
    for label, rows, color, style in curves:
        ok = rows[np.isfinite(rows["steps"])]
        ax.plot(ok["global_batch"], ok["steps"], color=color, label=label, **style)
        never += [(b, color) for b in rows[~np.isfinite(rows["steps"])]["global_batch"]]
    draw_never(ax, never, top)
    if knee is not None:
        perfect_line(ax, knee, np.array(sorted(best["global_batch"]), dtype=float))
    if fit is not None:
        xs = np.geomspace(float(best["global_batch"].min()), float(best["global_batch"].max()))
        ax.plot(
            xs,
            [fit.steps(x) for x in xs],
            ":",
            color=FIT_COLOR,
            lw=1.8,
            label=f"fit S_min + E_min/B (B_crit ≈ {approx(fit.b_crit)})",
        )
    handles, labels = ax.get_legend_handles_labels()
    if len(never):
        handles.append(Line2D([], [], color="gray", **NEVER_MARKER))
        labels.append("median never reaches it (half the seeds or more missed)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_ylabel(target_label(target, split))
    ax.set_title(title)
    return fig


@styled
def rule_efficiency(efficiency: pd.DataFrame, title: str) -> Figure | None:
    """Each rule's efficiency against the LR oracle (oracle steps / its steps) per batch."""
    if efficiency.empty or efficiency["global_batch"].nunique() < 2:
        return None
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    ax.axhline(100, color="black", lw=1, ls="--", label="as few steps as the oracle")
    never: list[tuple[float, str]] = []
    for rule in data.rule_order(efficiency["lr_rule"]):
        rows = efficiency[efficiency["lr_rule"] == rule].sort_values("global_batch")
        color = rule_color(rule)
        ax.plot(rows["global_batch"], 100 * rows["efficiency"], "o-", color=color, label=rule)
        never += [(b, color) for b in rows[rows["efficiency"] == 0]["global_batch"]]
    draw_never(ax, never, 0)
    log2_axis(ax, efficiency["global_batch"])
    ax.set_ylim(-4, 110)
    percent_axis(ax)
    handles, labels = ax.get_legend_handles_labels()
    if len(never):
        handles.append(Line2D([], [], color="gray", **NEVER_MARKER))
        labels.append("never reaches the target (0 %)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_xlabel("global batch (samples per step)")
    ax.set_ylabel("efficiency: oracle steps / rule steps (%)")
    ax.set_title(title)
    return fig


@styled
def critical_batch(
    best: pd.DataFrame,
    knee: cb.Knee | None,
    fit: cb.CriticalFit | None,
    near: cb.NearTarget | None,
    target: float,
    title: str,
    split: str = "test",
) -> Figure | None:
    """The LR oracle's steps per batch with the fitted S(B) = S_min + E_min / B and perfect
    scaling; B_crit fitted and B_simple near the target as lines with their intervals as
    bands; the 2x knee beside B_noise + 2 B0, what the noise scale predicts for it."""
    reached = best[np.isfinite(best["steps"])]
    if knee is None or (fit is None and near is None) or reached.empty:
        return None
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    batches = np.array(sorted(best["global_batch"].unique()), dtype=float)
    marks = [v for v in (fit.b_crit if fit else None, near.batch if near else None) if v]
    marks = [v for v in marks if math.isfinite(v)]
    lo_x = min(batches[0], *marks) / 1.3
    hi_x = max(batches[-1], *marks) * 1.3
    # measured batches, plus powers of two where the axis reaches past them for the prediction
    outside = [2.0**e for e in range(math.ceil(math.log2(lo_x)), math.floor(math.log2(hi_x)) + 1)]
    outside = [b for b in outside if b < batches[0] / 1.5 or b > batches[-1] * 1.5]
    steps = reached["steps"]
    top = steps_axes(
        ax, [*batches, *outside], pd.concat([steps, pd.Series([knee.perfect(batches[-1])])])
    )
    ax.plot(reached["global_batch"], steps, "D-", color=ORACLE_COLOR, lw=1.6, label="LR oracle")
    missed = best[~np.isfinite(best["steps"])]
    if len(missed):
        ax.plot(
            missed["global_batch"],
            [top] * len(missed),
            color=ORACLE_COLOR,
            label="no LR tried reached the target",
            **NEVER_MARKER,
        )
    xs = np.geomspace(lo_x, hi_x, 50)
    perfect_line(ax, knee, xs, twice=True)
    if fit is not None:
        ax.plot(xs, [fit.steps(x) for x in xs], ":", color=FIT_COLOR, lw=1.8, label="fit")
        critical_line(ax, fit.b_crit, fit.b_crit_ci, FIT_COLOR, "B_crit = E_min/S_min")
    if near is not None:
        critical_line(ax, near.batch, (near.low, near.high), "#2ca02c", "B_simple near target")
        ax.axvline(
            cb.predicted_knee(near.batch, knee.base_batch),
            color="#2ca02c",
            lw=1,
            ls="-.",
            label=f"B_simple + {cb.KNEE_FACTOR:g}·B0 (the knee it predicts)",
        )
    draw_knee(ax, knee)
    ax.set_xlim(lo_x, hi_x)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_ylabel(target_label(target, split))
    ax.set_title(title)
    return fig


def critical_line(ax: Axes, value: float, ci: tuple[float, float], color: str, label: str) -> None:
    """A batch as a vertical line, its interval as a band (where finite)."""
    if not math.isfinite(value):
        return
    low, high = ci
    if math.isfinite(low) and math.isfinite(high):
        ax.axvspan(low, high, color=color, alpha=0.13, lw=0)
    ax.axvline(value, color=color, lw=1.6, label=f"{label} ≈ {approx(value)} (95 % band)")


def draw_knee(ax: Axes, knee: cb.Knee) -> None:
    """A star where the knee was interpolated; a band between the batches that bracket it; a
    note where the data do not place it."""
    factor = f"{cb.KNEE_FACTOR:g}×"
    if knee.batch is not None:
        ax.plot(
            knee.batch,
            cb.KNEE_FACTOR * knee.perfect(knee.batch),
            "*",
            ms=15,
            color="#d62728",
            markeredgecolor="black",
            label=f"knee (leaves {factor}) ≈ {approx(knee.batch)}",
        )
        return
    if knee.beyond is not None:
        ax.axvspan(
            knee.within,
            knee.beyond,
            color="#d62728",
            alpha=0.12,
            lw=0,
            label=f"knee between {knee.within} and {knee.beyond}",
        )
        return
    note = f"knee above {knee.within}" if knee.placed else "knee not measurable\n(budget too short)"
    ax.annotate(
        note,
        (knee.within, knee.perfect(knee.within)),
        xytext=(8, 18),
        textcoords="offset points",
        arrowprops={"arrowstyle": "->", "color": "#d62728"},
        color="#d62728",
        fontsize=9,
    )


# How a time-to-target point's step time is drawn, by where it comes from.
TIME_SOURCES = [("measured", "o", {}), ("oversubscribed", "s", HOLLOW), ("model", "o", HOLLOW)]
TIME_SOURCE_LABELS = {
    "measured": "measured step time",
    "oversubscribed": "measured, oversubscribed (contention)",
    "model": "step time from the scaling model",
}


@styled
def time_to_target(
    fastest: pd.DataFrame, target: float, title: str, split: str = "test"
) -> Figure | None:
    """Time to target against workers, per rule and for the LR oracle, each at the per-worker
    batch that is fastest there; filled: measured step time, hollow: the scaling model's."""
    if fastest.empty or fastest["workers"].nunique() < 2:
        return None
    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    rules = [c for c in data.rule_order(fastest["curve"]) if c != "oracle"]
    for curve in ["oracle", *rules]:  # the oracle first, wide and pale, as in steps to target
        rows = fastest[fastest["curve"] == curve].sort_values("workers")
        oracle = curve == "oracle"
        color = ORACLE_COLOR if oracle else rule_color(curve)
        line = ORACLE_LINE if oracle else {"lw": 1.4}
        label = "LR oracle (best LR per batch)" if oracle else curve
        # solid only through step times measured without contention; dashed through the rest
        ax.plot(rows["workers"], rows["time_s"], color=color, lw=1, ls="--", alpha=0.6)
        fair = rows[rows["source"] == "measured"]
        ax.plot(fair["workers"], fair["time_s"], color=color, label=label, **line)
        source = rows["source"]
        for kind, marker, style in TIME_SOURCES:
            at = (source == kind).to_numpy(bool)
            ax.plot(rows["workers"][at], rows["time_s"][at], marker, color=color, **style)
        for _, row in rows.iterrows() if oracle else ():
            ax.annotate(
                f"×{int(row['per_worker_batch'])}",
                (row["workers"], row["time_s"]),
                xytext=(4, -12),
                textcoords="offset points",
                fontsize=8,
            )
    log2_axis(ax, fastest["workers"])
    plain_log_axis(ax, "y")
    handles, labels = ax.get_legend_handles_labels()
    kinds = set(fastest["source"])
    for kind, marker, style in TIME_SOURCES:
        if kind in kinds:
            handles.append(Line2D([], [], color="gray", marker=marker, ls="", **style))
            labels.append(TIME_SOURCE_LABELS[kind])
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_xlabel("workers (×b: the per-worker batch of the oracle's point)")
    ax.set_ylabel(f"time to {100 * target:g} % {split} accuracy (s, log scale)")
    ax.set_title(title)
    return fig
