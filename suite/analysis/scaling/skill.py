"""The model scored against two trivial forecasts, per family: a constant (the mean efficiency
of the counts a forecast may use, the baseline's 1.0 included) and "efficiency stays what it
was at the largest smaller count". A model that does not beat them adds nothing to what was
measured."""

from __future__ import annotations

import pandas as pd

FORECASTS = ("model", "constant", "stays")


def trivial_forecasts(smaller: dict[int, float]) -> dict[str, float]:
    """The two trivial forecasts from the efficiencies measured below the predicted count
    (``smaller``: count → efficiency against the baseline, whose own 1.0 is implied)."""
    known = [1.0, *(float(smaller[n]) for n in sorted(smaller))]
    return {"constant": sum(known) / len(known), "stays": known[-1]}


def _scored(rows: pd.DataFrame) -> dict[str, float]:
    """Mean |error| in efficiency points of the model and each forecast over ``rows``."""
    errors = {f: float((100 * (rows[f] - rows["published"])).abs().mean()) for f in FORECASTS}
    ratio = errors["model"] / errors["stays"] if errors["stays"] > 0 else float("inf")
    return {**errors, "ratio": 0.0 if errors["model"] == 0 else ratio}


def skill_by_family(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per family and one for all: rows, kinds, each forecast's mean |error| in
    points and the model's over "stays"'s."""
    lines = []
    for family, group in [*rows.groupby("family", sort=False), ("all", rows)]:
        kinds = " or ".join(dict.fromkeys(group["kind"]))
        lines.append({"family": family, "rows": len(group), "kind": kinds, **_scored(group)})
    return pd.DataFrame(lines)


def published_skill_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The published check (``published_table()``) as rows to score: the model's efficiency
    (a bound where nothing was measured beyond compute) and the trivial forecasts from what the
    row was given."""
    return pd.DataFrame(
        {
            "family": table["family"],
            "kind": table["kind"],
            "published": table["published_efficiency"],
            "model": table["predicted_efficiency"],
            "constant": table["constant"],
            "stays": table["stays"],
        }
    )


def format_skill(scored: pd.DataFrame) -> str:
    """The skill table as Markdown: mean |error| in efficiency points."""
    lines = [
        "| published | rows | model is | model | constant | stays what it was |",
        "|---|---|---|---|---|---|",
    ]
    for r in scored.itertuples():
        lines.append(
            f"| {r.family} | {r.rows} | {r.kind} | {r.model:.2f} | {r.constant:.2f} "
            f"| {r.stays:.2f} |"
        )
    return "\n".join(lines)


def validation_skill_rows(validation: pd.DataFrame) -> pd.DataFrame:
    """A results tree's validation as efficiencies to score: at each multi-worker count, the
    measured one, the model's (its step over the measured single-worker step), and the two
    forecasts from the counts measured below it at the same per-worker batch."""
    ok = validation[~validation["oversubscribed"].astype(bool)]
    rows = []
    for batch, group in ok.groupby("per_worker_batch"):
        group = group.sort_values("workers")
        single = group[group["workers"] == 1]["measured_step_s"]
        if single.empty:
            continue
        base, smaller = float(single.iloc[0]), {}
        for r in group[group["workers"] > 1].itertuples():
            measured = base / r.measured_step_s
            rows.append(
                {
                    "workers": int(r.workers),
                    "per_worker_batch": int(batch),
                    "family": "all",
                    "kind": "validation",
                    "published": measured,
                    "model": base / r.predicted_step_s,
                    **trivial_forecasts(smaller),
                }
            )
            smaller[int(r.workers)] = measured
    return pd.DataFrame(rows)


def format_validation_skill(validation: pd.DataFrame) -> list[str]:
    """One line: the validation's mean |error| in efficiency points, model beside forecasts."""
    rows = validation_skill_rows(validation) if not validation.empty else pd.DataFrame()
    if rows.empty:
        return []
    s = _scored(rows)
    return [
        f"   skill over {len(rows)} multi-worker rows (efficiency, mean |error| in points): "
        f"model {s['model']:.1f}, constant {s['constant']:.1f} (mean of the smaller counts'), "
        f"stays {s['stays']:.1f} (as at the largest smaller count)"
    ]
