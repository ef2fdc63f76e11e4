"""Leave-last-out on the published tables that give two or more GPU counts below their
largest: the model's synchronisation term (``sync_cost``) is fitted to the efficiency at every
smaller count, the largest count is predicted, and the model is scored
against the trivial forecasts from the same smaller counts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from dpsuite.analysis.scaling.published import PUBLISHED, published_entries, published_model
from dpsuite.analysis.scaling.skill import trivial_forecasts
from dpsuite.analysis.scaling.sync_cost import with_sync

# Fixed before the numbers were computed: the model's mean |error| over a family's held-out
# rows is at most this share of the "stays what it was" forecast's.
TARGET_RATIO = 0.75


def eligible(entry: dict) -> bool:
    """A table with two or more counts below the row's: the baseline and one more at least."""
    return len(entry.get("smaller_counts") or {}) >= 1


def held_out_model(entry: dict) -> float:
    """The model's efficiency at the row's count, its synchronisation term fitted to the
    table's efficiency at every smaller count (against the table's baseline)."""
    smaller = {int(n): float(e) for n, e in entry["smaller_counts"].items()}
    workers, batch = int(entry["workers"]), int(entry["batch"])
    base = int(entry["baseline_workers"])
    model = published_model({**entry, "measured_efficiency": None})
    model = with_sync(replace(model, measured=("compute",)), smaller, base, batch)
    return model.efficiency(workers, batch, base)


def leave_last_out_table(path: Path = PUBLISHED) -> pd.DataFrame:
    """One row per eligible published table: the held-out count, the count fitted on, the
    published efficiency, the model's and the two trivial forecasts'."""
    rows = []
    for entry in published_entries(path):
        if not eligible(entry):
            continue
        smaller = {int(n): float(e) for n, e in entry["smaller_counts"].items()}
        rows.append(
            {
                "label": entry["label"],
                "family": entry["family"],
                "kind": "estimate",
                "workers": int(entry["workers"]),
                "fitted_on": max(smaller),
                "published": float(entry["published_efficiency"]),
                "model": held_out_model(entry),
                **trivial_forecasts(smaller),
            }
        )
    return pd.DataFrame(rows)


def format_leave_last_out(scored: pd.DataFrame) -> str:
    """The leave-last-out skill as Markdown, with whether each line meets the target."""
    lines = [
        "| held out | rows | model | constant | stays what it was | model / stays "
        f"| target ≤ {TARGET_RATIO:g} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in scored.itertuples():
        verdict = "meets" if r.ratio <= TARGET_RATIO else "misses"
        lines.append(
            f"| {r.family} | {r.rows} | {r.model:.2f} | {r.constant:.2f} | {r.stays:.2f} "
            f"| {r.ratio:.2f} | {verdict} |"
        )
    return "\n".join(lines)
