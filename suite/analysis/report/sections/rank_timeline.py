"""Which rank is slow: each rank's own step split into compute, data wait, exposed
communication and the wait for slower ranks (from steps_by_rank.csv; runs without one, from
before it was recorded or with one rank, show nothing here)."""

from __future__ import annotations

import functools

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dpsuite.analysis.report import render, studies
from dpsuite.analysis.report.plots import outside_legend, panel_grid, series_color, styled
from dpsuite.analysis.report.section import Section

TOPIC = "Per-rank step timeline"
PLOTS = ("rank_timeline",)
HEADLINE: dict[str, int] = {}
MAX_PANELS = 6  # runs drawn; the table lists them all
# The parts of a rank's step, bottom to top: (column of `rank_medians`, legend label).
PARTS = (
    ("compute_s", "compute"),
    ("data_wait_s", "waiting for data"),
    ("exposed_comm_s", "exposed communication"),
    ("peer_wait_s", "waiting for slower ranks"),
)
# A rank this much slower than the ranks' median compute is named as a straggler.
STRAGGLER_SHARE = 0.05


def section(context: studies.Context) -> Section:
    part = Section()
    medians = {
        run_id: rank_medians(frame) for run_id, frame in sorted(context.tree.rank_steps.items())
    }
    medians = {run_id: m for run_id, m in medians.items() if len(m) > 1}
    if not medians:
        return part
    part.findings += [f for run_id, m in medians.items() if (f := slow_rank_finding(run_id, m))]
    part.plot(
        "rank_timeline",
        functools.partial(rank_timeline_plot, medians),
        "Per-rank step timeline",
        "Each rank's own median step over the steps in its steps_by_rank.csv: its compute, its "
        "wait for data, the exposed all-reduce (the least wait for communication of any rank) "
        "and its wait for slower ranks. The slow rank computes longest and waits least: the "
        f"others wait for it. At most {MAX_PANELS} runs are drawn; the table lists every run.",
    )
    part.tables.append(
        render.Table(
            "Per-rank step timeline",
            timeline_table(medians),
            "Medians per rank over the recorded steps, in ms (steps_by_rank.csv).",
        )
    )
    return part


def rank_medians(frame: pd.DataFrame) -> pd.DataFrame:
    """Per rank, the median of each part of its step (s), indexed by rank."""
    f = frame.apply(pd.to_numeric, errors="coerce")
    sampled = f["comm_wait_s"].notna()
    f["compute_s"] = f["compute_s"].where(sampled, f["step_time_s"] - f["data_wait_s"])
    f["exposed_comm_s"] = (f["comm_wait_s"] - f["peer_wait_s"]).where(sampled, 0.0)
    f["peer_wait_s"] = f["peer_wait_s"].where(sampled, 0.0)
    columns = ["step_time_s", *(column for column, _ in PARTS)]
    return f.groupby("rank")[columns].median().sort_index()


def slow_rank_finding(run_id: str, medians: pd.DataFrame) -> str | None:
    """One sentence naming the slowest rank when its compute stands out, else None."""
    compute = medians["compute_s"]
    typical = float(compute.median())
    slowest = int(compute.idxmax())
    if typical <= 0 or compute.max() < (1 + STRAGGLER_SHARE) * typical:
        return None
    others = float(medians.drop(index=slowest)["peer_wait_s"].median())
    waited = (
        f"; the other ranks wait {1e3 * others:.2f} ms a step for slower ranks" if others else ""
    )
    return (
        f"{run_id}: rank {slowest} is the slowest: it computes {1e3 * compute.max():.2f} ms a "
        f"step, {100 * (compute.max() / typical - 1):.0f} % above the ranks' median "
        f"({1e3 * typical:.2f} ms){waited}."
    )


def timeline_table(medians: dict[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for run_id, m in medians.items():
        for rank, row in m.iterrows():
            rows.append(
                {
                    "run": run_id,
                    "rank": int(rank),
                    "step_ms": 1e3 * row["step_time_s"],
                    **{column.replace("_s", "_ms"): 1e3 * row[column] for column, _ in PARTS},
                }
            )
    return pd.DataFrame(rows)


@styled
def rank_timeline_plot(medians: dict[str, pd.DataFrame]) -> Figure | None:
    """One panel per run: a stacked bar per rank."""
    runs = list(medians.items())[:MAX_PANELS]
    fig, axes = panel_grid(len(runs))
    for ax, (run_id, m) in zip(axes, runs, strict=True):
        left = pd.Series(0.0, index=m.index)
        # Ranks at numeric positions, labelled: strings would make matplotlib guess (and log).
        positions = list(range(len(m.index)))
        for i, (column, label) in enumerate(PARTS):
            ms = 1e3 * m[column].fillna(0.0)
            ax.barh(
                positions, ms.to_numpy(), left=left.to_numpy(), color=series_color(i), label=label
            )
            left += ms
        ax.set_yticks(positions, [str(r) for r in m.index])
        ax.invert_yaxis()
        ax.set_xlabel("median step (ms)")
        ax.set_ylabel("rank")
        ax.set_title(run_id, fontsize=8)
    handles = [Patch(color=series_color(i)) for i in range(len(PARTS))]
    outside_legend(fig, handles, [label for _, label in PARTS])
    fig.suptitle("Where each rank's step goes")
    return fig
