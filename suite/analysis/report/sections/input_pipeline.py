"""The input pipeline measured by `dpsuite input-bench`: samples/s against loader workers per
rank count, its findings and table."""

from __future__ import annotations

import functools

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dpsuite.analysis.report import render, studies
from dpsuite.analysis.report.plots import outside_legend, panel_grid, series_color, styled
from dpsuite.analysis.report.section import Section

TOPIC = "Input pipeline"
PLOTS = ("input_pipeline",)
HEADLINE: dict[str, int] = {}
IN_MEMORY = "in memory"  # input_bench.json's pipeline of in-memory tensors


def section(context: studies.Context) -> Section:
    inputs = context.tree.inputs
    part = Section()
    if inputs.empty:
        return part
    part.findings += input_findings(inputs)
    part.plot(
        "input_pipeline",
        functools.partial(input_rate_plot, inputs),
        "Input pipeline: samples/s vs loader workers",
        "From `dpsuite input-bench`: the workload's training input pipeline alone (the "
        "engine's DataLoader per rank over its DistributedSampler share; in memory: the "
        "index gather), all ranks together, one line per rank count. A training step cannot "
        "be faster than the per-worker batch / the per-rank rate.",
    )
    part.tables.append(
        render.Table(
            "Input pipeline",
            input_table(inputs),
            "samples/s: all ranks together (the slowest rank's time); per rank: the slowest "
            "rank's; first batch: until it was on hand (loader workers starting).",
        )
    )
    return part


def input_table(inputs: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "machine": inputs["machine"],
            "workload": inputs["workload"],
            "pipeline": inputs["pipeline"],
            "ranks": inputs["ranks"],
            "loader_workers": inputs["loader_workers"],
            "per_worker_batch": inputs["per_worker_batch"],
            "samples_per_s": inputs["samples_per_s"],
            "samples_per_s_per_rank": inputs["samples_per_s_per_rank"],
            "first_batch_ms": 1e3 * inputs["first_batch_s"],
        }
    )


def input_findings(inputs: pd.DataFrame) -> list[str]:
    """Per machine, workload and rank count: the best loader workers and what they add."""
    out = []
    for (machine, workload, ranks), grp in inputs.groupby(
        ["machine", "workload", "ranks"], sort=True
    ):
        best = grp.loc[grp["samples_per_s"].idxmax()]
        n = int(ranks)
        sentence = (
            f"{workload} on {machine}: the input pipeline gives {best['samples_per_s']:,.0f} "
            f"samples/s with {n} rank{'s' if n > 1 else ''} "
            f"({best['samples_per_s_per_rank']:,.0f} per rank"
        )
        if best["pipeline"] == IN_MEMORY:
            sentence += ", in memory: the index gather only)"
        else:
            w = int(best["loader_workers"])
            sentence += f", at {w} loader worker{'s' if w != 1 else ''})"
            zero = grp[grp["loader_workers"] == 0]
            if len(zero) and int(best["loader_workers"]) > 0:
                gain = best["samples_per_s"] / zero["samples_per_s"].iloc[0]
                sentence += f", {gain:.2f}× its rate without loader workers"
        out.append(sentence + ".")
    return out


@styled
def input_rate_plot(inputs: pd.DataFrame) -> Figure | None:
    """samples/s (all ranks) against loader workers, one panel per workload and machine."""
    panels = list(inputs.groupby(["workload", "machine"], sort=True))
    fig, axes = panel_grid(len(panels))
    rank_counts = sorted(int(r) for r in inputs["ranks"].unique())
    for ax, ((workload, machine), grp) in zip(axes, panels, strict=True):
        for ranks, line in grp.groupby("ranks", sort=True):
            line = line.sort_values("loader_workers")
            ax.plot(
                line["loader_workers"],
                line["samples_per_s"],
                "o-",
                color=series_color(rank_counts.index(int(ranks))),
            )
        ax.set_xticks(sorted(int(w) for w in grp["loader_workers"].unique()))
        ax.set_xlabel("loader workers per rank")
        ax.set_ylabel("samples/s (all ranks)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{workload} · {machine}", fontsize=10)
    handles = [Line2D([], [], color=series_color(i), marker="o") for i in range(len(rank_counts))]
    outside_legend(fig, handles, [f"{r} rank{'s' if r > 1 else ''}" for r in rank_counts])
    fig.suptitle("Input pipeline throughput")
    return fig
