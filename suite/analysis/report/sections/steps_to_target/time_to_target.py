"""Time to target of a steps-to-target study: against worker count, measured and predicted by
the scaling model; its table, findings and headline candidate."""

from __future__ import annotations

import functools

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dpsuite.analysis.report import data, render, studies, time_to_target_table
from dpsuite.analysis.report.plots import (
    HOLLOW,
    ORACLE_COLOR,
    ORACLE_LINE,
    log2_axis,
    plain_log_axis,
    rule_color,
    styled,
)
from dpsuite.analysis.report.section import Section

PLOTS = ("time_to_target",)


def study_section(study: studies.TargetStudy, suffix: str, about: str) -> Section:
    """Time to target against workers, measured and predicted; its table and findings."""
    part = Section()
    if study.times.empty:
        return part
    target = study.target_text
    validated = (
        f" (validated up to {study.model.validated_max} workers)" if study.model is not None else ""
    )
    part.plot(
        f"time_to_target{suffix}",
        functools.partial(
            time_to_target,
            time_to_target_table.fastest_per_workers(study.times),
            f"Time to {target}{about}",
            study.goal_text,
        ),
        f"Time to {study.goal_text} vs workers{about}",
        f"Steps to {target} at global batch N·b (seed median) × the step time of N workers "
        "of per-worker batch b: training steps only. Filled circles: the step time measured "
        "by this machine's scaling runs (median) with no more worker threads than cores, "
        "joined by solid lines; hollow squares: measured, but oversubscribed (contention, not "
        "scaling: never counted as measured); hollow circles: predicted by the scaling model "
        "fitted to "
        f"them{validated}. At each worker count the per-worker batch (of those the scaling "
        "runs measured) that reaches the target soonest; black: at the LR oracle's best LR "
        "per batch, colours: each rule.",
    )
    part.tables.append(times_table(study, about))
    part.findings += time_findings(study)
    return part


def times_table(study: studies.TargetStudy, about: str) -> render.Table:
    """Every time to target, sorted by where its step time comes from."""
    target = study.target_text
    order = {
        time_to_target_table.MEASURED: 0,
        time_to_target_table.OVERSUBSCRIBED: 1,
        time_to_target_table.MODEL: 2,
    }
    times = study.times.sort_values(
        ["source", "curve", "workers", "per_worker_batch"],
        key=lambda col: col.map(order) if col.name == "source" else col,
        kind="stable",
    )
    return render.Table(
        f"Time to {target}{about}",
        pd.DataFrame(
            {
                "curve": times["curve"],
                "workers": times["workers"],
                "per_worker_batch": times["per_worker_batch"],
                "global_batch": times["global_batch"],
                "steps": times["steps"],
                "step_time_ms": 1e3 * times["step_time_s"],
                "step_time": [step_time_source(row) for _, row in times.iterrows()],
                "time_s": times["time_s"],
            }
        ),
        "Training steps only, sorted by where the step time comes from. measured: median "
        "step time of this machine's scaling runs; oversubscribed: measured with more "
        "worker threads than cores, the time of contention, kept apart from the measured "
        "points; model: the scaling model fitted to them (extrapolated: beyond the worker "
        "counts it was validated at).",
    )


def step_time_source(row: pd.Series) -> str:
    """Where a time-to-target row's step time comes from, in the table's words."""
    if row["source"] == time_to_target_table.MODEL and row["extrapolated"]:
        return "model, extrapolated"
    return str(row["source"])


# How a time-to-target point's step time is drawn, by where it comes from.
TIME_SOURCES = [("measured", "o", {}), ("oversubscribed", "s", HOLLOW), ("model", "o", HOLLOW)]


TIME_SOURCE_LABELS = {
    "measured": "measured step time",
    "oversubscribed": "measured, oversubscribed (contention)",
    "model": "step time from the scaling model",
}


@styled
def time_to_target(fastest: pd.DataFrame, title: str, goal: str = "the target") -> Figure | None:
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
    ax.set_ylabel(f"time to {goal} (s, log scale)")
    ax.set_title(title)
    return fig


def time_findings(study: studies.TargetStudy) -> list[str]:
    """The fastest way to the target on this machine, at the best LR and under each rule."""
    times = study.times
    if times.empty:
        return []
    target = study.target_text
    out = []
    best = time_to_target_table.fastest(times, time_to_target_table.ORACLE)
    if best.measured is not None:
        row = best.measured
        out.append(
            f"Time to {target} (training steps only) at the best LR per batch: fastest measured "
            f"on this machine with {point(row)} ({seconds(row['time_s'])}: "
            f"{row['steps']:,.0f} steps of {1e3 * row['step_time_s']:.2g} ms)"
            + predicted_clause(best.predicted, study.model)
            + "."
        )
    parts = []
    for rule in data.rule_order(times[times["curve"] != time_to_target_table.ORACLE]["curve"]):
        found = time_to_target_table.fastest(times, rule)
        if found.measured is not None:
            parts.append(f"`{rule}` {point(found.measured)} ({seconds(found.measured['time_s'])})")
    if parts:
        out.append(f"Fastest measured time to {target} per rule: {', '.join(parts)}.")
    return out


def predicted_clause(row: pd.Series | None, model) -> str:
    """'; the scaling model predicts ...' for a faster point beyond the measurements."""
    if row is None:
        return ""
    beyond = (
        f", extrapolated beyond the {model.validated_max} workers it was validated at"
        if row["extrapolated"] and model is not None
        else ""
    )
    return f"; the scaling model predicts {seconds(row['time_s'])} with {point(row)}{beyond}"


def fastest_headline(study: studies.TargetStudy) -> str | None:
    """The fastest measured way to the target on this machine, and the model's, if faster."""
    if study.times.empty:
        return None
    best = time_to_target_table.fastest(study.times, time_to_target_table.ORACLE)
    if best.measured is None:
        return None
    row = best.measured
    return (
        f"On this machine {study.target_text} is reached fastest with {point(row)} "
        f"({seconds(row['time_s'])} of training steps at the best LR)"
        + predicted_clause(best.predicted, study.model)
        + "."
    )


def seconds(value: float) -> str:
    """Readable seconds: 0.42 s, 3.1 s, 45 s, 12 min."""
    if value >= 600:
        return f"{value / 60:.0f} min"
    if value >= 10:
        return f"{value:.0f} s"
    return f"{value:.2g} s"


def point(row: pd.Series) -> str:
    """N workers × b, as a sentence names a configuration."""
    n = int(row["workers"])
    return f"{n} worker{'s' if n > 1 else ''} × {int(row['per_worker_batch'])}"
