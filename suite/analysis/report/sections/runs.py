"""The runs of a report: how many diverged, failed or still run, and the table of those that
produced no result (first among the tables)."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.report import data, render, studies
from dpsuite.analysis.report.section import Section

TOPIC = "Runs"
PLOTS: tuple[str, ...] = ()
HEADLINE: dict[str, int] = {}  # no headline candidate


def section(context: studies.Context) -> Section:
    if not context.has_runs:
        return Section()
    runs = context.tree.runs
    part = Section(findings=run_status_findings(runs))
    unfinished = data.unfinished_runs(runs)
    if len(unfinished):
        part.tables.append(
            render.Table(
                "Failed runs",
                unfinished,
                "Runs that produced no result (failed, or still running); not plotted.",
            )
        )
    return part


def run_status_findings(runs: pd.DataFrame) -> list[str]:
    counts = runs["status"].value_counts()
    out = []
    total = len(runs)
    if counts.get("diverged", 0):
        out.append(
            f"{counts['diverged']} of {total} runs diverged (non-finite loss); they are drawn "
            "with an × at their last finite evaluation."
        )
    if counts.get("failed", 0):
        out.append(f"{counts['failed']} of {total} runs failed; they are listed under Failed runs.")
    if counts.get("running", 0):
        out.append(f"{counts['running']} of {total} runs are still running and are not plotted.")
    return out
