"""The critical batch of a steps-to-target study: fitted to steps to target beside the one the
gradient noise scale predicts near the target, and the knee of the oracle's curve; their plot
(after the noise scale over training, `noise_scale`), findings and headline candidate."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dpsuite.analysis.report import critical_batch_fit, data, render, studies, target_study
from dpsuite.analysis.report.critical_batch_fit import KNEE_FACTOR, NEAR_TARGET
from dpsuite.analysis.report.plots import (
    FIT_COLOR,
    NEVER_MARKER,
    ORACLE_COLOR,
    perfect_line,
    steps_axes,
    styled,
    target_label,
)
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.sections.steps_to_target import by_target_plot, noise_scale
from dpsuite.analysis.report.text import approx, capital, plural

PLOTS = ("critical_batch", "b_crit_by_target")
# What the critical-batch plot draws.
CRITICAL_BATCH_CAPTION = (
    "Black: the LR oracle's steps to target per global batch; dotted purple: S(B) = "
    "S_min + E_min / B fitted to them (least squares in relative error, censored and "
    "untuned batches left out), and its B_crit = E_min / S_min (purple line; band: 95 % "
    "bootstrap interval over seeds, or where the seeds cannot vary it the range over where each "
    "hit lies within its evaluation interval). Green: B_simple near the target, the median over "
    f"the LR oracle's runs of each run's B_simple pooled over the windows in the last "
    f"{100 * NEAR_TARGET:g} % of its steps before the target (band: 95 % bootstrap "
    "interval of the median). Dashed: perfect scaling from the oracle's smallest batch "
    f"B0; grey dotted: {KNEE_FACTOR:g}× that. The knee (★) is the first batch where "
    f"the steps leave {KNEE_FACTOR:g}× perfect scaling, interpolated in log-log space "
    "(a shaded band where only its bracket is known); green dash-dot: where "
    "S = S_min (1 + B_noise/B) with B_noise the green value puts it, B_noise + "
    f"{KNEE_FACTOR:g}·B0."
)


def study_section(
    study: studies.TargetStudy, tree: data.ResultsTree, suffix: str, about: str
) -> Section:
    """B_simple over training and the predicted vs found critical batch; their findings."""
    part = Section()
    part.plots += noise_scale.plots(study, tree, suffix, about)
    fit, near = study.fit, study.near
    if study.knee is not None and (fit is not None or near is not None):
        part.plot(
            f"critical_batch{suffix}",
            functools.partial(
                critical_batch,
                study.best,
                study.knee,
                fit,
                near,
                f"Critical batch: fitted vs predicted{about}",
                study.goal_text,
            ),
            f"Critical batch: fitted to steps to target vs predicted from the noise scale{about}",
            CRITICAL_BATCH_CAPTION,
        )
    part.findings += critical_batch_findings(study)
    if len(study.by_target):  # (the plot refuses fewer than two targets itself)
        part.plot(
            f"b_crit_by_target{suffix}",
            functools.partial(
                by_target_plot.by_target,
                study.by_target,
                study.target_metric,
                f"B_crit and B_simple by target{about}",
            ),
            f"B_crit and B_simple near the target, by target{about}",
            by_target_plot.CAPTION,
        )
    if len(study.by_target):
        part.tables.append(
            render.Table(
                f"B_crit by target{about}",
                by_target_table(study),
                "S(B) = S_min + E_min / B fitted at each target as at the study's own (untuned "
                "batches left out), each run's hit recounted from its evaluations with the "
                "study's hitting rule; the interval's source as in the findings. B_simple near "
                "it: the gradient noise scale of the LR oracle's runs at that target over the "
                f"last {100 * NEAR_TARGET:g} % of their steps before reaching it (median over "
                "runs, 95 % bootstrap interval of the median).",
            )
        )
    return part


def by_target_table(study: studies.TargetStudy) -> pd.DataFrame:
    """One row per target: batches fitted, S_min, E_min, B_crit and its interval."""
    rows = []
    for _, row in study.by_target.iterrows():
        fitted = math.isfinite(row["b_crit"]) or math.isinf(row["b_crit"])
        ci = (row["low"], row["high"])
        rows.append(
            {
                "target": target_words(study, row["target"]),
                "batches fitted": int(row["batches"]),
                "left out": left_out_text(row["untuned"], row["censored"]),
                "S_min (steps)": approx(row["s_min"]) if fitted else "-",
                "E_min (samples)": approx(row["e_min"]) if fitted else "-",
                "B_crit": (approx(row["b_crit"]) if math.isfinite(row["b_crit"]) else "∞")
                if fitted
                else "no fit (fewer than 3 tuned batches)",
                "interval": source_interval(row["source"], ci) if fitted else "",
                **near_cells(row),
            }
        )
    return pd.DataFrame(rows)


def near_cells(row: pd.Series) -> dict[str, str]:
    """B_simple near one target, its interval and its ratio to B_crit, as table cells."""
    b_simple, b_crit = row.get("b_simple", math.nan), row["b_crit"]
    if not math.isfinite(b_simple):
        return {"B_simple near it": "-", "B_simple interval": "", "B_simple / B_crit": ""}
    ratio = b_simple / b_crit if math.isfinite(b_crit) and b_crit > 0 else math.nan
    return {
        "B_simple near it": approx(b_simple),
        "B_simple interval": interval_text((row["b_simple_low"], row["b_simple_high"])),
        "B_simple / B_crit": f"{ratio:.2f}" if math.isfinite(ratio) else "",
    }


def left_out_text(untuned: list[int], censored: list[int]) -> str:
    """The batches a fit left out, and why, in a table cell."""
    parts = [
        f"{', '.join(map(str, batches))} ({why})"
        for batches, why in ((untuned, "not tuned"), (censored, "not reached"))
        if batches
    ]
    return "; ".join(parts) or "-"


def source_interval(source: str, ci: tuple[float, float]) -> str:
    if source == critical_batch_fit.FROM_GRANULARITY:
        return interval_text(ci, "range") + " (evaluation granularity)"
    if source == critical_batch_fit.NO_INTERVAL:
        return "no interval"
    return interval_text(ci) + " (seeds)"


@styled
def critical_batch(
    best: pd.DataFrame,
    knee: critical_batch_fit.Knee | None,
    fit: critical_batch_fit.CriticalFit | None,
    near: critical_batch_fit.NearTarget | None,
    title: str,
    goal: str = "the target",
) -> Figure | None:
    """The LR oracle's steps per batch with the fitted S(B) = S_min + E_min / B and perfect
    scaling; B_crit fitted and B_simple near the target as lines with their intervals as
    bands; the 2x knee beside B_noise + 2 B0, what the noise scale predicts for it."""
    reached = best[np.isfinite(best["steps"])]
    if knee is None or (fit is None and near is None) or reached.empty:
        return None
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    batches = np.array(sorted(best["global_batch"].unique()), dtype=float)
    marks = [v for v in (fit.b_crit if fit else None, near.batch if near else None) if v]
    marks = [v for v in marks if math.isfinite(v)]
    lo_x = min(batches[0], *marks) / 1.3
    hi_x = max(batches[-1], *marks) * 1.3
    # measured batches, plus powers of two where the axis reaches past them for the prediction
    outside = [2.0**e for e in range(math.ceil(math.log2(lo_x)), math.floor(math.log2(hi_x)) + 1)]
    outside = [b for b in outside if b < batches[0] / 1.5 or b > batches[-1] * 1.5]
    steps = reached["steps"]
    top = steps_axes(
        ax, [*batches, *outside], pd.concat([steps, pd.Series([knee.perfect(batches[-1])])])
    )
    ax.plot(reached["global_batch"], steps, "D-", color=ORACLE_COLOR, lw=1.6, label="LR oracle")
    missed = best[~np.isfinite(best["steps"])]
    if len(missed):
        ax.plot(
            missed["global_batch"],
            [top] * len(missed),
            color=ORACLE_COLOR,
            label="no LR tried reached the target",
            **NEVER_MARKER,
        )
    xs = np.geomspace(lo_x, hi_x, 50)
    perfect_line(ax, knee, xs, twice=True)
    if fit is not None:
        ax.plot(xs, [fit.steps(x) for x in xs], ":", color=FIT_COLOR, lw=1.8, label="fit")
        band = "range" if fit.source == critical_batch_fit.FROM_GRANULARITY else "95 % band"
        critical_line(ax, fit.b_crit, fit.b_crit_ci, FIT_COLOR, "B_crit = E_min/S_min", band)
    if near is not None:
        critical_line(ax, near.batch, (near.low, near.high), "#2ca02c", "B_simple near target")
        ax.axvline(
            critical_batch_fit.predicted_knee(near.batch, knee.base_batch),
            color="#2ca02c",
            lw=1,
            ls="-.",
            label=f"B_simple + {KNEE_FACTOR:g}·B0 (the knee it predicts)",
        )
    draw_knee(ax, knee)
    ax.set_xlim(lo_x, hi_x)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_ylabel(target_label(goal))
    ax.set_title(title)
    return fig


def critical_line(
    ax: Axes,
    value: float,
    ci: tuple[float, float],
    color: str,
    label: str,
    band: str = "95 % band",
) -> None:
    """A batch as a vertical line, its interval as a band (where finite)."""
    if not math.isfinite(value):
        return
    low, high = ci
    if math.isfinite(low) and math.isfinite(high):
        ax.axvspan(low, high, color=color, alpha=0.13, lw=0)
    ax.axvline(value, color=color, lw=1.6, label=f"{label} ≈ {approx(value)} ({band})")


def draw_knee(ax: Axes, knee: critical_batch_fit.Knee) -> None:
    """A star where the knee was interpolated; a band between the batches that bracket it; a
    note where the data do not place it."""
    factor = f"{KNEE_FACTOR:g}×"
    if knee.batch is not None:
        ax.plot(
            knee.batch,
            KNEE_FACTOR * knee.perfect(knee.batch),
            "*",
            ms=15,
            color="#d62728",
            markeredgecolor="black",
            label=f"knee (leaves {factor}) ≈ {approx(knee.batch)}",
        )
        return
    if knee.beyond is not None:
        ax.axvspan(
            knee.within,
            knee.beyond,
            color="#d62728",
            alpha=0.12,
            lw=0,
            label=f"knee between {knee.within} and {knee.beyond}",
        )
        return
    note = f"knee above {knee.within}" if knee.placed else "knee not measurable\n(budget too short)"
    ax.annotate(
        note,
        (knee.within, knee.perfect(knee.within)),
        xytext=(8, 18),
        textcoords="offset points",
        arrowprops={"arrowstyle": "->", "color": "#d62728"},
        color="#d62728",
        fontsize=9,
    )


def knee_text(knee: critical_batch_fit.Knee) -> str:
    """Where the LR oracle's curve leaves perfect scaling, or why that is not known."""
    factor = f"{KNEE_FACTOR:g}×"
    head = f"the LR oracle's steps to target stay within {factor} perfect scaling up to batch "
    if knee.batch is not None:
        return (
            f"the LR oracle's steps to target leave {factor} perfect scaling at global batch ≈ "
            f"{approx(knee.batch)} (interpolated in log-log between {knee.within} and "
            f"{knee.beyond})"
        )
    if knee.beyond is not None:
        return (
            f"{head}{knee.within}, and at {knee.beyond} no LR reached the target within a budget "
            f"of {knee.room:.1f}× its perfect-scaling steps: the knee lies between {knee.within} "
            f"and {knee.beyond}"
        )
    if knee.unreached is not None:
        room = f"only {knee.room:.1f}×" if math.isfinite(knee.room or math.nan) else "unknown"
        return (
            f"{head}{knee.within}; at {knee.unreached} no LR reached the target, but its budget "
            f"allows {room} the perfect-scaling steps, so the knee is not placed"
        )
    if knee.short_budget is not None:
        return (
            f"{head}{knee.within}, but from batch {knee.short_budget} on the budget allows at most "
            f"{knee.room:.1f}× the perfect-scaling steps, so no batch could leave {factor}: this "
            "budget cannot measure the knee"
        )
    return (
        f"{head.removesuffix('batch ')}the largest batch measured ({knee.within}), with room in "
        "the budget to leave it: "
        f"the knee lies above {knee.within}"
    )


def critical_batch_findings(study: studies.TargetStudy) -> list[str]:
    """B_crit fitted beside the noise scale near the target; the knee beside what the noise
    scale predicts for it; the pooled noise scale (secondary); what was left out."""
    out = [*fit_findings(study), *by_target_findings(study)]
    knee = study.knee
    if knee is not None:
        out.append(capital(knee_text(knee)) + knee_prediction_text(study) + ".")
    out += noise_scale.findings(study)
    return out


def fit_text(fit: critical_batch_fit.CriticalFit) -> str:
    """S_min, E_min and B_crit with their intervals (rounded as their points are)."""
    return (
        f"S_min ≈ {approx(fit.s_min)} steps ({fit_interval(fit, fit.s_min_ci)}), E_min ≈ "
        f"{approx(fit.e_min)} samples ({fit_interval(fit, fit.e_min_ci)}), B_crit = E_min / "
        f"S_min ≈ {approx(fit.b_crit)} ({fit_interval(fit, fit.b_crit_ci)})"
    )


def fit_interval(fit: critical_batch_fit.CriticalFit, ci: tuple[float, float]) -> str:
    """One of the fit's intervals, named by where it comes from."""
    if fit.source == critical_batch_fit.FROM_GRANULARITY:
        return interval_text(ci, "range")
    if fit.source == critical_batch_fit.NO_INTERVAL:
        return "no interval"
    return interval_text(ci)


def interval_source_text(fit: critical_batch_fit.CriticalFit) -> str:
    """Where the fit's intervals come from, in words."""
    if fit.source == critical_batch_fit.FROM_SEEDS:
        return (
            "the intervals resample the seeds of every LR at every batch and take the oracle "
            f"again ({fit.resamples} resamples)"
        )
    head = f"the seeds give no interval: {fit.why_not_seeds}"
    if fit.source == critical_batch_fit.FROM_GRANULARITY:
        return (
            f"{head}; the ranges are over where each batch's hit lies, known only to within the "
            "evaluation interval before it (the fit at every corner of that box)"
        )
    return f"{head}, and the evaluation interval is not recorded: no interval"


def outward(value: float, up: bool) -> float:
    """``value`` rounded to two significant digits away from the interval's inside, so that a
    rounded interval still holds its rounded point."""
    if not math.isfinite(value) or value == 0:
        return value
    unit = 10 ** (math.floor(math.log10(abs(value))) - 1)
    return (math.ceil if up else math.floor)(value / unit) * unit


def interval_text(ci: tuple[float, float], name: str = "95 % interval") -> str:
    low, high = ci
    if not (math.isfinite(low) or math.isinf(low)) or math.isnan(high):
        return "no interval"
    top = approx(outward(high, up=True)) if math.isfinite(high) else "∞"
    return f"{name} {approx(outward(low, up=False))}–{top}"


def spread_clause(study: studies.TargetStudy) -> str:
    """The range of B_crit over the fit and its alternative choices, as a clause."""
    spread, fit = study.spread, study.fit
    if spread is None or fit is None or not spread.values:
        return ""
    hull = (min(spread.low, fit.b_crit), max(spread.high, fit.b_crit))
    return f"; {interval_text(hull, '').strip()} over the fit choices"


def spread_findings(study: studies.TargetStudy) -> list[str]:
    """What B_crit depends on: its value under each alternative fit choice, beside the
    interval."""
    spread, fit = study.spread, study.fit
    if spread is None or fit is None or not spread.values:
        return []
    each = ", ".join(
        f"{label} {v:,.0f}" if math.isfinite(v) else f"{label} ∞"
        for label, v in spread.choices.items()
        if not math.isnan(v)
    )
    low, high = fit.b_crit_ci
    wider = not (low <= spread.low and spread.high <= high)
    return [
        f"B_crit = {fit.b_crit:,.0f} under the fit's choices (relative error, every tuned "
        f"batch, every LR setting), {spread_clause(study).removeprefix('; ')}: {each}; "
        + (
            "wider than its interval, which covers only "
            + ("the seeds" if fit.source == critical_batch_fit.FROM_SEEDS else "where hits lie")
            if wider
            else "within its interval"
        )
        + "."
    ]


def by_target_findings(study: studies.TargetStudy) -> list[str]:
    """B_crit against the target, in one sentence (McCandlish et al.: it grows as the target
    gets harder)."""
    table = study.by_target.dropna(subset=["b_crit"])
    if len(table) < 2:
        return []
    pairs = ", ".join(
        f"{approx(b) if math.isfinite(b) else '∞'} at {target_words(study, t)}"
        for t, b in zip(table["target"], table["b_crit"], strict=True)
    )
    ordered = table["b_crit"].to_numpy(float)
    trend = (
        "it grows as the target gets harder, as McCandlish et al. (2018) find"
        if (np.diff(ordered) > 0).all()
        else "it does not grow steadily with the target, as McCandlish et al. (2018) would have it"
    )
    return [
        f"B_crit depends on the target (each recounted from the evaluations with the study's "
        f"hitting rule): {pairs}; {trend}.",
        *near_by_target_findings(study),
    ]


def near_by_target_findings(study: studies.TargetStudy) -> list[str]:
    """B_simple near each target, and its ratio to B_crit there."""
    table = study.by_target
    if "b_simple" not in table:
        return []
    table = table[np.isfinite(table["b_simple"].to_numpy(float))]
    if len(table) < 2:
        return []
    pairs = ", ".join(
        f"{approx(b)} at {target_words(study, t)}"
        for t, b in zip(table["target"], table["b_simple"], strict=True)
    )
    ratios = (table["b_simple"] / table["b_crit"]).to_numpy(float)
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    ratio = f"; B_simple / B_crit {ratios.min():.2f}–{ratios.max():.2f}" if len(ratios) else ""
    return [f"B_simple near each target (the LR oracle's runs at it): {pairs}{ratio}."]


def target_words(study: studies.TargetStudy, target: float) -> str:
    if study.target_metric == target_study.LOSS:
        return f"eval loss ≤ {target:g}"
    return f"{100 * target:g} %"


def fit_findings(study: studies.TargetStudy) -> list[str]:
    """The fitted trade-off S(B) = S_min + E_min / B, and the noise scale near the target."""
    fit, near = study.fit, study.near
    out = []
    if fit is None:
        out.append(
            "No critical batch fitted: fewer than 3 tuned batches (S(B) = S_min + E_min / B "
            "needs the LR oracle's steps at 3 or more batches that reached the target and are "
            "known to be tuned)."
        )
    else:
        left = [
            f"{', '.join(map(str, batches))} ({why})"
            for batches, why in (
                (fit.censored, "no LR reached the target in half its seeds"),
                (fit.untuned, "not known to be tuned"),
            )
            if batches
        ]
        out.append(
            "Critical batch fitted as McCandlish et al. (2018) define it: S(B) = S_min + "
            f"E_min / B fitted to the LR oracle's seed-median steps at batches "
            f"{', '.join(map(str, fit.batches))} (least squares in relative error"
            + (f"; left out: {'; '.join(left)}" if left else "")
            + f"): {fit_text(fit)}; {interval_source_text(fit)}."
        )
        out += spread_findings(study)
    if near is None:
        out.append(
            "No gradient noise scale near the target: the LR oracle's runs recorded no window "
            "of B_simple before they reached it."
        )
        return out
    sentence = (
        f"B_simple near the target (the windows of the last {NEAR_PERCENT} of the steps before "
        f"each of the LR oracle's runs reached {study.target_text}, pooled per run; median "
        f"over {plural(near.runs, 'run')}): ≈ {approx(near.batch)} "
        f"({interval_text((near.low, near.high))} of the median)"
    )
    if near.without:
        sentence += f"; {plural(near.without, 'run')} without a window before it left out"
    if fit is not None and math.isfinite(fit.b_crit):
        sentence += (
            f". Predicted / fitted B_crit = {near.batch / fit.b_crit:.2g} "
            f"(predicted {approx(near.batch)}, {interval_text((near.low, near.high))}; fitted "
            f"{approx(fit.b_crit)}, {fit_interval(fit, fit.b_crit_ci)}): "
            + (
                "within an order of magnitude, as McCandlish et al. report"
                if 0.1 <= near.batch / fit.b_crit <= 10
                else "more than an order of magnitude apart"
            )
        )
    return out + [sentence + "."]


NEAR_PERCENT = f"{100 * NEAR_TARGET:g} %"


def knee_prediction_text(study: studies.TargetStudy) -> str:
    """The knee beside what the noise scale predicts for a 2×-perfect-scaling knee."""
    knee, near = study.knee, study.near
    if knee is None or near is None:
        return ""
    expected = critical_batch_fit.predicted_knee(near.batch, knee.base_batch)
    ratio = critical_batch_fit.predicted_over_found(expected, knee)
    if ratio is None:
        return ""
    low, high = ratio
    found = (
        f"= {low:.2g}"
        if low == high
        else f"< {high:.2g}"
        if low == 0
        else f"between {low:.2g} and {high:.2g}"
    )
    return (
        f"; for that definition the noise scale near the target predicts B_noise + "
        f"{KNEE_FACTOR:g}·B0 = {approx(expected)} (B0 = {knee.base_batch}): predicted / "
        f"found {found}"
        + (
            f" (B0 = {knee.base_batch} is not tuned: the knee is unreliable)"
            if knee.base_batch in set(study.faster["global_batch"])
            else ""
        )
    )


def knee_and_prediction(study: studies.TargetStudy) -> str | None:
    """The fitted critical batch beside the noise scale near the target (or, without a fit,
    where steps to target leave perfect scaling)."""
    fit, near = study.fit, study.near
    untuned = sorted(int(b) for b in study.faster["global_batch"])
    left_out = (
        f"batch {', '.join(map(str, untuned))} left out: steps fell faster than perfect "
        "scaling from it, so it is not tuned"
        if untuned
        else ""
    )
    if fit is not None:
        dropped = (
            f"; batch {', '.join(map(str, fit.untuned))} left out: not known to be tuned"
            if fit.untuned
            else ""
        )
        sentence = (
            f"Critical batch fitted to the best LR's steps to {study.target_text}: B_crit = "
            f"E_min / S_min ≈ {approx(fit.b_crit)} ({fit_interval(fit, fit.b_crit_ci)}"
            + spread_clause(study)
            + f"{dropped})"
        )
        if near is not None and math.isfinite(fit.b_crit):
            sentence += (
                f"; the gradient noise scale near the target predicts ≈ {approx(near.batch)} "
                f"({interval_text((near.low, near.high))}): predicted / fitted = "
                f"{near.batch / fit.b_crit:.2g}"
            )
        return sentence + "."
    knee = study.knee
    if knee is None:
        return None
    band = f"{KNEE_FACTOR:g}× perfect scaling"
    if knee.batch is not None:
        found = f"leave {band} at global batch ≈ {approx(knee.batch)}"
    elif knee.beyond is not None:
        found = f"leave {band} between global batch {knee.within} and {knee.beyond}"
    elif knee.placed:
        found = f"stay within {band} up to global batch {knee.within}, the largest measured"
    else:
        found = f"stay within {band} up to global batch {knee.within}; the budget cannot tell more"
    caveat = f" ({left_out})" if left_out else ""
    return (
        f"No critical batch fitted (fewer than 3 tuned batches reached {study.target_text}); "
        f"steps to it (best LR per batch) {found}{caveat}."
    )
