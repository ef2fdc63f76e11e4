"""`dpsuite report`: one results tree -> index.html, index.md, one PNG per plot, summary.csv
(and summary.parquet with pyarrow).

A report is its sections in order (`SECTIONS`): each is one topic of `sections`, and each
gives its findings (filed under the topic), plots, tables and headline candidates.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpsuite.analysis.report import data, headline, meta, render, studies
from dpsuite.analysis.report.output import FigureWriter, Written, default_out, prepare_out
from dpsuite.analysis.report.sections import (
    comm,
    convergence,
    input_pipeline,
    model,
    rank_timeline,
    run_list,
    runs,
    scaling,
    steps_to_target,
    sync,
)
from dpsuite.results import owned

# The sections of a report, top to bottom: one topic each.
SECTIONS = (
    runs,
    scaling,
    comm,
    rank_timeline,
    input_pipeline,
    model,
    sync,
    convergence,
    steps_to_target,
    run_list,
)
# Every plot a report can write: one PNG (and SVG) each, with a "-<study>" suffix where a
# report holds several studies of a topic.
PLOT_NAMES = tuple(name for topic in SECTIONS for name in topic.PLOTS)
# The headline candidates the sections declare, by their rank (see `headline`).
PRIORITY = headline.priority(SECTIONS)
REFERENCE_RESULTS = Path("results/reference")
NO_PLOT = (
    "No plot applies to these results: scaling plots need complete DDP runs at two or "
    "more worker counts; convergence plots need runs at two or more global batches "
    "under two or more LR rules (or simulated workers)."
)


def build_report(results_dir: str | Path, out: str | Path | None = None) -> Written:
    """Read ``results_dir`` and write its report to ``out`` (default reports/<name>)."""
    tree = data.load_tree(results_dir)
    out = prepare_out(Path(out) if out is not None else default_out(results_dir))
    report = render.Report(
        title=f"dpsuite report: {Path(results_dir).resolve().name}",
        meta=[meta.status_line(tree), *meta.machines_lines(tree.runs, tree.comm)],
    )
    note = data.synthetic_note(tree.runs) if not tree.runs.empty else None
    if note:
        report.meta.append(note)
    context = studies.context(tree)
    figs = FigureWriter(out)
    candidates: dict[str, str] = {}
    for topic in SECTIONS:
        part = topic.section(context)
        report.findings += part.findings
        report.file(topic.TOPIC)
        for plot in part.plots:
            figs.add(plot)
        report.tables += part.tables
        candidates.update(part.headline)
    report.figures = figs.write(meanwhile=lambda: write_summary(tree, context.has_runs, out))
    report.headline = headline.choose(candidates, tree.runs, PRIORITY)
    if not report.figures:
        report.headline.append(NO_PLOT)
    report.warnings = tree.warnings
    render.write(report, out)
    owned.finish(out)
    return Written(out=out, warnings=tree.warnings, headline=report.headline)


def write_summary(tree: data.ResultsTree, has_runs: bool, out: Path) -> None:
    """summary.csv (and summary.parquet): one row per run, or only the header."""
    if has_runs:
        data.write_summary(data.summary_frame(tree.runs), out, tree.units)
    else:
        data.write_summary(pd.DataFrame(columns=["machine", *data.RUN_COLUMNS]), out, None)
