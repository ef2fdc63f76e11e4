"""The all-reduce (and other collectives) measured by `dpsuite comm-bench`: bandwidth against
message size, its findings and headline candidate."""

from __future__ import annotations

import functools
import math

import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure

from dpsuite.analysis.report import data, studies
from dpsuite.analysis.report.plots import HOLLOW, LINESTYLES, outside_legend, series_color, styled
from dpsuite.analysis.report.scaling_validity import valid
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.text import human_bytes

TOPIC = "All-reduce"
PLOTS = ("allreduce_bandwidth",)
# Headline candidate and its rank (see `headline`): last, the measurement behind scaling's.
HEADLINE = {"bandwidth": 70}


def section(context: studies.Context) -> Section:
    tree = context.tree
    part = Section()
    measured = with_traffic(tree.comm)
    part.candidate("bandwidth", bandwidth(measured, context.scaling, tree.runs))
    if tree.comm.empty:
        return part
    part.findings += comm_bench_findings(tree.comm)
    if measured.empty:
        return part
    part.plot(
        "allreduce_bandwidth",
        functools.partial(allreduce_bandwidth, measured),
        f"{data.collectives_label(measured)} bandwidth vs message size",
        "From `dpsuite comm-bench` (nccl-tests definitions): algbw = bytes / time; "
        "busbw = algbw × the collective's factor (all-reduce 2(n−1)/n; all-gather, "
        "reduce-scatter, all-to-all (n−1)/n; broadcast 1), the per-link rate, comparable "
        "across rank counts.",
    )
    return part


def with_traffic(comm: pd.DataFrame) -> pd.DataFrame:
    """The benchmarks of two or more ranks: on one rank a collective moves no bytes between
    ranks (busbw is 0 by definition), so it checks the path but has no bandwidth to show."""
    if comm.empty:
        return comm
    return comm[pd.to_numeric(comm["world_size"], errors="coerce").fillna(2) >= 2]


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
    message_size_axes(axes, sorted(comm["size_bytes"].unique()))
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


def message_size_axes(axes, sizes: list[float]) -> None:
    """Both panels: message size on a log2 axis (at most eight ticks, in bytes), GB/s from 0."""
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


def comm_bench_findings(comm: pd.DataFrame) -> list[str]:
    """Per benchmark and collective: the peak bus bandwidth, and sizes with wrong results."""
    out = []
    keys = ["machine", "world_size", "backend", "bench_id", "collective"]
    for (machine, world, backend, _, collective), grp in comm.groupby(
        keys, dropna=False, sort=True
    ):
        ranks = f"{int(world)} ranks" if pd.notna(world) else "? ranks"
        name = str(collective).replace("_", "-")
        errors = pd.to_numeric(grp["errors"], errors="coerce").fillna(0)
        if world == 1:
            fastest = grp.loc[grp["time_us"].idxmin()]
            out.append(
                f"{machine}, 1 rank ({backend}): the {name} ran and was checked at "
                f"{len(grp)} message sizes ({int((errors > 0).sum())} wrong), fastest "
                f"{fastest['time_us']:.1f} µs; bus bandwidth needs 2 or more ranks."
            )
            continue
        peak = grp.loc[grp["busbw_GBps"].idxmax()]
        out.append(
            f"{machine}, {ranks} ({backend}): peak {name} bus bandwidth "
            f"{peak['busbw_GBps']:.2f} GB/s at {human_bytes(peak['size_bytes'])} messages."
        )
        if (errors > 0).any():
            out.append(
                f"{machine}, {ranks}: the {name} gave wrong results at "
                f"{int((errors > 0).sum())} message sizes; its timings are not to be trusted."
            )
    return out


def bandwidth(comm: pd.DataFrame, scaling: pd.DataFrame, runs: pd.DataFrame) -> str | None:
    """Peak busbw of the widest benchmark that was not oversubscribed, and the busbw at the
    message size of the worst-scaling workload's gradient."""
    comm = comm[comm["collective"] == "all_reduce"] if not comm.empty else comm
    if comm.empty:
        return None
    over = comm.get("hardware.oversubscribed", pd.Series(False, index=comm.index)).eq(True)
    pool = comm[~over] if (~over).any() else comm
    widest = pool[pool["world_size"] == pool["world_size"].max()]
    bench = widest[widest["bench_id"] == widest["bench_id"].iloc[0]]
    peak = bench.loc[bench["busbw_GBps"].idxmax()]
    machine = f" on {peak['machine']}" if comm["machine"].nunique() > 1 else ""
    sentence = (
        f"All-reduce bus bandwidth{machine} ({int(peak['world_size'])} ranks, {peak['backend']}) "
        f"peaks at {peak['busbw_GBps']:.2f} GB/s with {human_bytes(peak['size_bytes'])} messages"
    )
    gradient = gradient_bytes(scaling, runs)
    if gradient is not None:
        workload, size = gradient
        near = bench.loc[(bench["size_bytes"] / size).map(lambda r: abs(math.log(r))).idxmin()]
        if near["size_bytes"] != peak["size_bytes"]:
            sentence += (
                f", but reaches {near['busbw_GBps']:.2f} GB/s at {human_bytes(near['size_bytes'])},"
                f" about one {workload} gradient ({human_bytes(round(size))})"
            )
    return sentence + "."


def gradient_bytes(scaling: pd.DataFrame, runs: pd.DataFrame) -> tuple[str, float] | None:
    """The worst-scaling workload and the bytes its runs all-reduce per step."""
    if scaling.empty or "wire_bytes_per_step" not in runs.columns:
        return None
    trusted = valid(scaling)
    more = trusted[trusted["workers"] > trusted["base_workers"]]
    if more.empty:
        return None
    workload = more.loc[more["efficiency"].idxmin(), "workload"]
    sent = runs[(runs["workload"] == workload) & (runs["wire_bytes_per_step"] > 0)][
        "wire_bytes_per_step"
    ]
    return (workload, float(sent.median())) if len(sent) else None
