"""Warmup as its own axis of a steps-to-target study: the best setting with and without warmup
per batch (`warmup_axis`), as a table and a finding that names where the LR oracle takes
which."""

from __future__ import annotations

import math

import pandas as pd

from dpsuite.analysis.report import render, studies
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.text import steps_text


def study_section(study: studies.TargetStudy, about: str) -> Section:
    part = Section()
    table = study.warmup.rename(columns={"with_over_without": "ratio"})
    if table.empty:
        return part
    part.findings.append(warmup_finding(study))
    part.tables.append(
        render.Table(
            f"LR oracle with and without warmup: fewest steps to {study.target_text}{about}",
            warmup_table(table),
            "Per global batch, the best LR setting without warmup and the best with it (at "
            "the base batch the base-LR runs count as both: warmup from the base LR changes "
            "nothing); the LR oracle is the fewer of the two.",
        )
    )
    return part


def warmup_table(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "global_batch": table["global_batch"],
            "steps without warmup": [steps_text(s) for s in table["steps_without"]],
            "peak LR without": table["lr_without"],
            "steps with warmup": [steps_text(s) for s in table["steps_with"]],
            "peak LR with": table["lr_with"],
            "with / without": [f"{r:.2f}" if math.isfinite(r) else "-" for r in table["ratio"]],
            "oracle takes": [
                taken(a, b)
                for a, b in zip(table["steps_without"], table["steps_with"], strict=True)
            ],
        }
    )


def taken(without: float, warm: float) -> str:
    """Which kind of setting the LR oracle takes at a batch, from the best steps of each."""
    if math.isinf(without) and math.isinf(warm):
        return "neither reached it"
    if math.isinf(without) or math.isinf(warm):
        return "only warmup reached it" if math.isinf(without) else "only no warmup reached it"
    return "warmup" if warm < without else "no warmup" if warm > without else "either"


def warmup_finding(study: studies.TargetStudy) -> str:
    """Where the LR oracle's best setting warms up and where it does not."""
    table = study.warmup.rename(columns={"with_over_without": "ratio"})
    by_choice: dict[str, list[str]] = {}
    for _, row in table.iterrows():
        choice = taken(row["steps_without"], row["steps_with"])
        by_choice.setdefault(choice, []).append(str(int(row["global_batch"])))
    parts = [f"{choice} at {', '.join(batches)}" for choice, batches in by_choice.items()]
    ratios = ", ".join(
        f"{r:.2f} at {b}"
        for b, r in zip(table["global_batch"], table["ratio"], strict=True)
        if math.isfinite(r)
    )
    return (
        f"Warmup as its own axis: the LR oracle's best setting to {study.target_text} is "
        f"{'; '.join(parts)} (best steps with warmup / best without: {ratios})."
    )
