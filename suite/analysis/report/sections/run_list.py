"""Every run of a report in one table, last on the page."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.report import render, studies
from dpsuite.analysis.report.section import Section

TOPIC = "All runs"  # the table of every run; it has no findings of its own
PLOTS: tuple[str, ...] = ()
HEADLINE: dict[str, int] = {}  # no headline candidate


def section(context: studies.Context) -> Section:
    if not context.has_runs:
        return Section()
    return Section(
        tables=[
            render.Table(
                "All runs",
                listing(context.tree.runs),
                "Every column of every run is in `summary.csv`.",
            )
        ]
    )


def listing(all_runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its status, configuration, throughput and final accuracy."""
    runs = all_runs.sort_values(["workload", "mode", "lr_rule", "global_batch", "workers", "seed"])
    listing = pd.DataFrame(
        {
            "run_id": runs["run_id"],
            "status": runs["status"],
            "machine": runs["machine"],
            "workers": runs["workers"],
            "global_batch": runs["global_batch"],
            "lr_rule": runs["lr_rule"],
            "sync": runs["sync_label"],
            "seed": runs["seed"],
            "samples_per_s": runs["samples_per_s"],
            "step_time_ms": 1e3 * runs["step_time_s"],
            "final_acc_pct": 100 * runs["final_eval_acc"],
        }
    )
    for col in ("machine", "sync"):
        if listing[col].nunique() <= 1:
            listing = listing.drop(columns=col)
    return listing
