"""Leave-last-out on the published tables that give two or more GPU counts below their
largest: the model's synchronisation term (``sync_cost``) is fitted to the efficiency at every
smaller count, the largest count is predicted, and the model is scored
against the trivial forecasts from the same smaller counts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from dpsuite.analysis.scaling.model import ScalingModel
from dpsuite.analysis.scaling.published import PUBLISHED, published_entries, published_model
from dpsuite.analysis.scaling.skill import trivial_forecasts
from dpsuite.analysis.scaling.sync_cost import with_sync
from dpsuite.analysis.scaling.term_shares import step_terms

# Fixed before the numbers were computed: the model's mean |error| over a family's held-out
# rows is at most this share of the "stays what it was" forecast's.
TARGET_RATIO = 0.75


def eligible(entry: dict) -> bool:
    """A table with two or more counts below the row's: the baseline and one more at least."""
    return len(entry.get("smaller_counts") or {}) >= 1


def held_out_fit(entry: dict) -> ScalingModel:
    """The row's model with its synchronisation term fitted to the table's efficiency at every
    smaller count (against the table's baseline); the row's own count is never an input."""
    smaller = {int(n): float(e) for n, e in entry["smaller_counts"].items()}
    model = published_model({**entry, "measured_efficiency": None})
    return with_sync(
        replace(model, measured=("compute",)),
        smaller,
        int(entry["baseline_workers"]),
        int(entry["batch"]),
    )


def held_out_model(entry: dict) -> float:
    """The fitted model's efficiency at the row's count."""
    return _efficiency(held_out_fit(entry), entry)


def _efficiency(model: ScalingModel, entry: dict) -> float:
    workers, batch = int(entry["workers"]), int(entry["batch"])
    return model.efficiency(workers, batch, int(entry["baseline_workers"]))


def _shares(model: ScalingModel, entry: dict) -> str:
    """The held-out step's terms, each as its share of the step."""
    terms = step_terms(model, int(entry["workers"]), int(entry["batch"]))
    total = sum(t.seconds for t in terms) or 1.0
    return ", ".join(f"{t.name} {100 * t.seconds / total:.1f} %" for t in terms if t.seconds > 0)


def leave_last_out_table(path: Path = PUBLISHED) -> pd.DataFrame:
    """One row per eligible published table: the held-out count, the count fitted on, the
    published efficiency, the model's and the two trivial forecasts', the fitted term and the
    held-out step's terms."""
    rows = []
    for entry in published_entries(path):
        if not eligible(entry):
            continue
        smaller = {int(n): float(e) for n, e in entry["smaller_counts"].items()}
        model = held_out_fit(entry)
        sync = model.overheads.sync
        rows.append(
            {
                "label": entry["label"],
                "family": entry["family"],
                "kind": "estimate",
                "workers": int(entry["workers"]),
                "fitted_on": max(smaller),
                "published": float(entry["published_efficiency"]),
                "model": _efficiency(model, entry),
                **trivial_forecasts(smaller),
                "sync_fixed_s": sync.fixed_s,
                "sync_scale": sync.scale,
                "term_shares": _shares(model, entry),
            }
        )
    return pd.DataFrame(rows)


def format_leave_last_out_rows(table: pd.DataFrame) -> str:
    """Every held-out row as Markdown: published, the model and "stays what it was", their
    errors in points, the fitted synchronisation term and the terms of the predicted step."""
    lines = [
        "| table | GPUs | published | model | stays | model − published | stays − published "
        "| synchronisation fitted | terms of the predicted step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {r.label} | {r.workers} (fitted ≤ {r.fitted_on}) | {100 * r.published:.1f} "
            f"| {100 * r.model:.1f} | {100 * r.stays:.1f} "
            f"| {_points(r.model - r.published)} | {_points(r.stays - r.published)} "
            f"| {1e3 * r.sync_fixed_s:.2f} ms + {r.sync_scale:.2f} × latency | {r.term_shares} |"
        )
    return "\n".join(lines)


def _points(difference: float) -> str:
    """A difference of efficiencies in signed points, one decimal (no "-0.0")."""
    return f"{round(100 * difference, 1) + 0.0:+.1f}"


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
