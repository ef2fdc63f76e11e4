"""Synchronization strategies compared (see `dpsuite.analysis.report.strategies`): throughput,
bytes and accuracy per strategy, their table and findings; only when the results hold such runs."""

from __future__ import annotations

import functools

from dpsuite.analysis.report import render, strategies, studies
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.text import slug

TOPIC = "Synchronization strategies"
PLOTS = ("sync_throughput", "sync_bytes", "sync_tradeoff")


def section(context: studies.Context) -> Section:
    part = Section()
    if not context.has_runs:
        return part
    table = strategies.sync_table(context.tree.runs)
    if table.empty:
        return part
    groups = list(table.groupby("group", sort=True))
    for label, group in groups:
        suffix = f"-{slug(label)}" if len(groups) > 1 else ""
        about = f" ({label})" if len(groups) > 1 else ""
        part.plot(
            f"sync_throughput{suffix}",
            functools.partial(
                strategies.throughput_by_strategy, group, f"Throughput by synchronization{about}"
            ),
            f"Throughput per synchronization strategy vs workers{about}",
            "Median measured samples/s of the complete runs of each strategy. With one worker "
            "nothing is communicated, so every strategy starts from the same point.",
        )
        part.plot(
            f"sync_bytes{suffix}",
            functools.partial(
                strategies.bytes_by_strategy, group, f"Bytes communicated per step{about}"
            ),
            f"Bytes per step per strategy{about}",
            "Bytes each worker sends on the wire per training step, counted by the suite inside "
            "each strategy (a point-to-point send its tensor; an all-reduce of S bytes among n "
            "ranks 2(n-1)/n x S, as a ring sends; local SGD's averages spread over the steps "
            "between them). Hatched: the parameter server's own traffic. Runs with one worker "
            "communicate nothing.",
        )
        part.plot(
            f"sync_tradeoff{suffix}",
            functools.partial(
                strategies.accuracy_vs_bytes, group, f"Final accuracy vs communication{about}"
            ),
            f"Final accuracy vs bytes communicated{about}",
            "Each strategy's final test accuracy against its bytes per step per worker (log "
            "scale), one panel per worker count. Filled points are on the frontier: more than "
            "1 point more accurate than every strategy that communicates less; hollow points "
            "are not worth their extra bytes.",
        )
        part.findings += [
            f"{label}: {s}" if len(groups) > 1 else s for s in strategies.findings(group)
        ]
    part.tables.append(
        render.Table(
            "Synchronization strategies",
            strategies.table_for_report(table),
            "Medians per strategy and worker count. Bytes are per step per worker (the server's "
            "separately); comm: time the strategy's communication was in flight per step; "
            "exposed comm: the part of the step it added, where measured.",
        )
    )
    return part
