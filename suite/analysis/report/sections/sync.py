"""Synchronization strategies side by side: throughput, bytes and accuracy per strategy, their
table, plots and findings; only when the results hold such runs.

A comparison group is the complete DDP runs of one machine, workload, per-worker batch,
precision, LR rule and training budget; it is shown when it holds a run of a strategy other than
all-reduce. Where a group holds sharded runs (`zero1`, `fsdp`) beside all-reduce, memory per
rank by part against throughput (`dpsuite.analysis.report.sharding_memory`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dpsuite.analysis.report import data, render, sharding_memory, studies
from dpsuite.analysis.report.plots import log2_axis, plain_log_axis, series_color, styled
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.text import human_bytes, pct, slug

TOPIC = "Synchronization strategies"
PLOTS = ("sync_throughput", "sync_bytes", "sync_tradeoff")
HEADLINE: dict[str, int] = {}  # no headline candidate

REFERENCE = "allreduce"
SYNC_KEY = [
    "machine",
    "workload",
    "per_worker_batch",
    "precision",
    "device",
    "lr_rule",
    "epochs",
    "train_samples",
]
MEASURES = [
    "samples_per_s",
    "wire_bytes_per_step",
    "server_wire_bytes_per_step",
    "collectives_per_step",
    "comm_time_s",
    "exposed_comm_s",
    "final_eval_acc",
]
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
TOLERANCE = 0.01  # accuracy differences up to 1 point count as equal, as elsewhere in reports


def section(context: studies.Context) -> Section:
    part = Section()
    if not context.has_runs:
        return part
    table = sync_table(context.tree.runs)
    if table.empty:
        return part
    groups = list(table.groupby("group", sort=True))
    for label, group in groups:
        suffix = f"-{slug(label)}" if len(groups) > 1 else ""
        about = f" ({label})" if len(groups) > 1 else ""
        part.plot(
            f"sync_throughput{suffix}",
            functools.partial(
                throughput_by_strategy, group, f"Throughput by synchronization{about}"
            ),
            f"Throughput per synchronization strategy vs workers{about}",
            "Median measured samples/s of the complete runs of each strategy. With one worker "
            "nothing is communicated, so every strategy starts from the same point.",
        )
        part.plot(
            f"sync_bytes{suffix}",
            functools.partial(bytes_by_strategy, group, f"Bytes communicated per step{about}"),
            f"Bytes per step per strategy{about}",
            "Bytes each worker sends on the wire per training step, counted by the suite inside "
            "each strategy (a point-to-point send its tensor; an all-reduce of S bytes among n "
            "ranks 2(n-1)/n x S, as a ring sends; local SGD's averages spread over the steps "
            "between them). Hatched: the parameter server's own traffic. Runs with one worker "
            "communicate nothing.",
        )
        part.plot(
            f"sync_tradeoff{suffix}",
            functools.partial(accuracy_vs_bytes, group, f"Final accuracy vs communication{about}"),
            f"Final accuracy vs bytes communicated{about}",
            "Each strategy's final test accuracy against its bytes per step per worker (log "
            "scale), one panel per worker count. Filled points are on the frontier: more than "
            "1 point more accurate than every strategy that communicates less; hollow points "
            "are not worth their extra bytes.",
        )
        part.findings += [f"{label}: {s}" if len(groups) > 1 else s for s in findings(group)]
    part.tables.append(
        render.Table(
            "Synchronization strategies",
            table_for_report(table),
            "Medians per strategy and worker count. Bytes are per step per worker (the server's "
            "separately); comm: time the strategy's communication was in flight per step; "
            "exposed comm: the part of the step it added, where measured.",
        )
    )
    sharding = sharding_memory.sharding_table(context.tree.runs, SYNC_KEY)
    if not sharding.empty:
        part.tables += sharding_memory.tables(sharding)
        part.findings += sharding_memory.findings(sharding)
    return part


# ---- table --------------------------------------------------------------------------------------


def sync_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per group, strategy (label) and worker count: medians over complete DDP runs."""
    ok = runs[(runs["mode"] == "ddp") & (runs["status"] == "complete") & (runs["workers"] >= 1)]
    keep = [g for _, g in ok.groupby(SYNC_KEY, dropna=False) if (g["sync"] != REFERENCE).any()]
    if not keep:
        return pd.DataFrame()
    ok = pd.concat(keep, ignore_index=True)
    keys = [*SYNC_KEY, "sync", "sync_label", "workers"]
    grouped = ok.groupby(keys, dropna=False)
    table = grouped[MEASURES].median().join(grouped.size().rename("runs")).reset_index()
    table["group"] = data.series_labels(table, SYNC_KEY, always=["workload"])
    recorded = (
        ok.groupby("sync")["sync_order"].first() if "sync_order" in ok else pd.Series(dtype=float)
    )
    table["order"] = [
        (strategy_order(s, recorded.get(s)), label)
        for s, label in zip(table["sync"], table["sync_label"], strict=True)
    ]
    return table.sort_values(["group", "order", "workers"]).reset_index(drop=True)


def strategy_order(sync: str, recorded: float | None = None) -> int:
    """A strategy's place in tables and legends: as its runs recorded it (`sync_order`), or
    for results written before they did, the registry's (unknown ones last)."""
    if recorded is not None and not math.isnan(recorded):
        return int(recorded)
    from dpsuite.sync import STRATEGIES  # only for older results: it imports torch

    names = list(STRATEGIES)
    return names.index(sync) if sync in names else len(names)


def labels_in_order(table: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(table.sort_values("order")["sync_label"]))


def colors(table: pd.DataFrame) -> dict[str, str]:
    return {label: series_color(i) for i, label in enumerate(labels_in_order(table))}


# ---- plots --------------------------------------------------------------------------------------


@styled
def throughput_by_strategy(group: pd.DataFrame, title: str) -> Figure | None:
    """Measured samples/s against workers, one line per strategy."""
    if group["workers"].nunique() < 2:
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    color = colors(group)
    for i, label in enumerate(labels_in_order(group)):
        s = group[group["sync_label"] == label].sort_values("workers")
        marker = MARKERS[i % len(MARKERS)]
        ax.plot(s["workers"], s["samples_per_s"], marker=marker, color=color[label], label=label)
    log2_axis(ax, group["workers"])
    plain_log_axis(ax, "y")
    ax.legend(title="synchronization")
    ax.set_xlabel("workers (data-parallel ranks)")
    ax.set_ylabel("throughput (samples/s, log scale)")
    ax.set_title(title)
    return fig


@styled
def bytes_by_strategy(group: pd.DataFrame, title: str) -> Figure | None:
    """Bytes sent per step: per worker for each strategy, and the server's."""
    multi = group[(group["workers"] > 1) & (group["wire_bytes_per_step"] > 0)]
    if multi.empty:
        return None
    bars: list[tuple[str, pd.DataFrame, str]] = []
    for label in labels_in_order(multi):
        s = multi[multi["sync_label"] == label]
        bars.append((label, s.assign(value=s["wire_bytes_per_step"]), ""))
        server = s[s["server_wire_bytes_per_step"] > 0]
        if len(server):
            bars.append(
                (
                    f"{label}: server",
                    server.assign(value=server["server_wire_bytes_per_step"]),
                    "//",
                )
            )
    workers = sorted(int(w) for w in multi["workers"].unique())
    width = 0.8 / len(workers)
    fig = Figure(figsize=(max(7.0, 1.3 * len(bars) + 2), 4.8))
    ax = fig.add_subplot()
    for j, n in enumerate(workers):
        for i, (_, rows, hatch) in enumerate(bars):
            row = rows[rows["workers"] == n]
            if row.empty:
                continue
            x = i - 0.4 + width * (j + 0.5)
            value = row["value"].iloc[0]
            ax.annotate(
                human_bytes(value),
                (x, value),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                fontsize=7,
            )
            ax.bar(
                x,
                value,
                width,
                color=series_color(j),
                hatch=hatch,
                edgecolor="black" if hatch else series_color(j),
                lw=0.6,
            )
    values = pd.concat([rows["value"] for _, rows, _ in bars])
    bytes_axis(ax, [values.min() / 2, values.max() * 2], "y")
    ax.set_xticks(range(len(bars)), [name for name, _, _ in bars], rotation=20, ha="right")
    ax.grid(axis="x", visible=False)
    handles = [Line2D([], [], color=series_color(j), lw=8) for j in range(len(workers))]
    ax.legend(handles, [f"{n} workers" for n in workers], title="per step, sent")
    ax.set_ylabel("bytes sent per step by one rank (log scale)")
    ax.set_title(title)
    return fig


def bytes_axis(ax, values, axis: str = "y") -> None:
    """A log axis of bytes with ticks at powers of 4 (1 KiB, 4 KiB, 16 KiB, ...)."""
    from matplotlib import ticker

    finite = [float(v) for v in values if v and np.isfinite(v) and v > 0]
    lo, hi = math.floor(math.log2(min(finite)) / 2), math.ceil(math.log2(max(finite)) / 2)
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log", base=2)
    target.set_major_locator(ticker.FixedLocator([4.0**k for k in range(lo, hi + 1)]))
    target.set_major_formatter(ticker.FuncFormatter(lambda v, _: human_bytes(v)))
    target.set_minor_locator(ticker.NullLocator())
    (ax.set_ylim if axis == "y" else ax.set_xlim)(min(finite), max(finite))


def frontier(points: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """The points worth their bytes: more accurate, by more than ``tolerance``, than every
    point that communicates less (a one-seed difference within it is not a difference)."""
    ordered = points.sort_values(["wire_bytes_per_step", "final_eval_acc"], ascending=[True, False])
    best, keep = -math.inf, []
    for idx, row in ordered.iterrows():
        if row["final_eval_acc"] > best + tolerance:
            keep.append(idx)
            best = row["final_eval_acc"]
    return ordered.loc[keep]


@styled
def accuracy_vs_bytes(group: pd.DataFrame, title: str) -> Figure | None:
    """Final accuracy against bytes per step, one panel per worker count, frontier drawn."""
    have = group.dropna(subset=["final_eval_acc", "wire_bytes_per_step"])
    have = have[(have["workers"] > 1) & (have["wire_bytes_per_step"] > 0)]
    if have.empty:
        return None
    workers = sorted(int(w) for w in have["workers"].unique())
    fig = Figure(figsize=(4.6 * len(workers), 4.6))
    axes = fig.subplots(1, len(workers), sharey=True, squeeze=False)[0]
    color = colors(group)
    for ax, n in zip(axes, workers, strict=True):
        at = have[have["workers"] == n]
        front = frontier(at)
        ax.plot(
            front["wire_bytes_per_step"],
            100 * front["final_eval_acc"],
            "-",
            color="gray",
            lw=1.2,
            zorder=1,
            label="frontier",
        )
        for _, row in at.iterrows():
            on = row.name in front.index
            ax.plot(
                row["wire_bytes_per_step"],
                100 * row["final_eval_acc"],
                "o",
                ms=9,
                zorder=2,
                color=color[row["sync_label"]],
                mfc=color[row["sync_label"]] if on else "white",
                mew=2,
                label=row["sync_label"],
            )
        bytes_axis(
            ax,
            [have["wire_bytes_per_step"].min() / 1.6, have["wire_bytes_per_step"].max() * 1.6],
            "x",
        )
        ax.tick_params(axis="x", labelrotation=25)
        ax.set_xlabel("bytes sent per step per worker (log scale)")
        ax.set_title(f"{n} workers")
    axes[0].set_ylabel("final test accuracy (%)")
    legend: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    legend["dominated (hollow)"] = Line2D([], [], marker="o", ls="", color="gray", mfc="white")
    fig.legend(
        list(legend.values()),
        list(legend.keys()),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.06),
        ncol=3,
    )
    fig.suptitle(title)
    return fig


# ---- findings -----------------------------------------------------------------------------------


def findings(group: pd.DataFrame) -> list[str]:
    """Sentences from one comparison group's table."""
    out: list[str] = []
    multi = group[group["workers"] > 1]
    with_ref = multi.groupby("workers").filter(
        lambda g: (g["sync"] == REFERENCE).any() and g["sync_label"].nunique() > 1
    )
    if not with_ref.empty:
        n = int(with_ref["workers"].max())
        at = with_ref[with_ref["workers"] == n]
        ref = at[at["sync"] == REFERENCE].iloc[0]
        for _, row in at[at["sync"] != REFERENCE].iterrows():
            out.append(versus_reference(row, ref, n))
        out.append(fastest(at, ref, n))
    out.extend(server_growth(group))
    out.extend(frontier_finding(multi))
    return out


def versus_reference(row: pd.Series, ref: pd.Series, n: int) -> str:
    b, b_ref = row["wire_bytes_per_step"], ref["wire_bytes_per_step"]
    if b < b_ref:
        amount = f"{b_ref / b:.1f}× less than" if b > 0 else "none of"
    elif b > b_ref:
        amount = f"{b / b_ref:.1f}× more than"
    else:
        amount = "the same as"
    speed = row["samples_per_s"] / ref["samples_per_s"]
    sentence = (
        f"At {n} workers, `{row['sync_label']}` sends {human_bytes(b)} per step per worker, "
        f"{amount} all-reduce's {human_bytes(b_ref)}; "
        f"{row['samples_per_s']:,.0f} samples/s ({speed:.2f}× all-reduce)"
    )
    acc, acc_ref = row["final_eval_acc"], ref["final_eval_acc"]
    if pd.notna(acc) and pd.notna(acc_ref):
        delta = round(100 * (acc - acc_ref), 1) + 0.0  # never "-0.0"
        sentence += f"; final accuracy {pct(acc)} ({delta:+.1f} points)"
    return sentence + "."


def fastest(at: pd.DataFrame, ref: pd.Series, n: int) -> str:
    top = at.loc[at["samples_per_s"].idxmax()]
    speed = f"{top['samples_per_s']:,.0f} samples/s"
    if top["sync"] == REFERENCE:
        return f"At {n} workers, all-reduce is the fastest strategy ({speed})."
    ratio = top["samples_per_s"] / ref["samples_per_s"]
    return (
        f"At {n} workers, the fastest strategy is `{top['sync_label']}`: {speed}, "
        f"{ratio:.2f}× all-reduce."
    )


def server_growth(group: pd.DataFrame) -> list[str]:
    """How the parameter server's traffic grows with workers, against a worker's."""
    out = []
    for label in labels_in_order(group):
        s = group[(group["sync_label"] == label) & (group["server_wire_bytes_per_step"] > 0)]
        if s["workers"].nunique() < 2:
            continue
        s = s.sort_values("workers")
        first, last = s.iloc[0], s.iloc[-1]
        n0, n1 = int(first["workers"]), int(last["workers"])
        s0, s1 = first["server_wire_bytes_per_step"], last["server_wire_bytes_per_step"]
        out.append(
            f"`{label}`: the server sends {human_bytes(s0)} per "
            f"step at {n0} workers and {human_bytes(s1)} at {n1} "
            f"({s1 / s0:.1f}×), while a "
            f"worker sends {human_bytes(first['wire_bytes_per_step'])} at {n0} and "
            f"{human_bytes(last['wire_bytes_per_step'])} at {n1}."
        )
    return out


def frontier_finding(multi: pd.DataFrame) -> list[str]:
    have = multi.dropna(subset=["final_eval_acc", "wire_bytes_per_step"])
    have = have[have["wire_bytes_per_step"] > 0]
    if have["sync_label"].nunique() < 2:
        return []
    n = int(have["workers"].max())
    at = have[have["workers"] == n]
    if len(at) < 2:
        return []
    front = frontier(at)
    on = ", ".join(
        f"`{r['sync_label']}` ({human_bytes(r['wire_bytes_per_step'])}, {pct(r['final_eval_acc'])})"
        for _, r in front.iterrows()
    )
    sentence = (
        f"At {n} workers, the accuracy–communication frontier (each strategy on it is more than "
        f"1 point more accurate than every cheaper one) is {on}"
    )
    dominated = [
        f"`{label}`" for label in at["sync_label"] if label not in set(front["sync_label"])
    ]
    if dominated:
        sentence += f"; dominated: {', '.join(dominated)}"
    return [sentence + "."]


def table_for_report(table: pd.DataFrame) -> pd.DataFrame:
    shown = table.assign(
        bytes_per_step_KiB=table["wire_bytes_per_step"] / 1024,
        server_wire_bytes_per_step_KiB=table["server_wire_bytes_per_step"] / 1024,
        comm_ms=1e3 * table["comm_time_s"],
        exposed_comm_ms=1e3 * table["exposed_comm_s"],
        final_acc_pct=100 * table["final_eval_acc"],
    )
    cols = [
        "group",
        "sync_label",
        "workers",
        "runs",
        "samples_per_s",
        "bytes_per_step_KiB",
        "server_wire_bytes_per_step_KiB",
        "collectives_per_step",
        "comm_ms",
        "exposed_comm_ms",
        "final_acc_pct",
    ]
    if table["group"].nunique() == 1:
        cols.remove("group")
    out = shown[cols].rename(columns={"sync_label": "sync"})
    return out.dropna(axis=1, how="all").replace({np.nan: None})
