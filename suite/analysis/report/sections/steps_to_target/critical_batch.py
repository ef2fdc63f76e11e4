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

from dpsuite.analysis.report import critical_batch_fit, data, studies
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
from dpsuite.analysis.report.sections.steps_to_target import noise_scale
from dpsuite.analysis.report.text import approx, capital, pct, plural

PLOTS = ("critical_batch",)
# What the critical-batch plot draws.
CRITICAL_BATCH_CAPTION = (
    "Black: the LR oracle's steps to target per global batch; dotted purple: S(B) = "
    "S_min + E_min / B fitted to them (least squares in relative error, censored and "
    "untuned batches left out), and its B_crit = E_min / S_min (purple line; band: 95 % "
    "bootstrap interval over seeds). Green: B_simple near the target, the median over "
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
                study.target,
                f"Critical batch: fitted vs predicted{about}",
                study.split,
            ),
            f"Critical batch: fitted to steps to target vs predicted from the noise scale{about}",
            CRITICAL_BATCH_CAPTION,
        )
    part.findings += critical_batch_findings(study)
    return part


@styled
def critical_batch(
    best: pd.DataFrame,
    knee: critical_batch_fit.Knee | None,
    fit: critical_batch_fit.CriticalFit | None,
    near: critical_batch_fit.NearTarget | None,
    target: float,
    title: str,
    split: str = "test",
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
        critical_line(ax, fit.b_crit, fit.b_crit_ci, FIT_COLOR, "B_crit = E_min/S_min")
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
    ax.set_ylabel(target_label(target, split))
    ax.set_title(title)
    return fig


def critical_line(ax: Axes, value: float, ci: tuple[float, float], color: str, label: str) -> None:
    """A batch as a vertical line, its interval as a band (where finite)."""
    if not math.isfinite(value):
        return
    low, high = ci
    if math.isfinite(low) and math.isfinite(high):
        ax.axvspan(low, high, color=color, alpha=0.13, lw=0)
    ax.axvline(value, color=color, lw=1.6, label=f"{label} ≈ {approx(value)} (95 % band)")


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
    out = [*fit_findings(study)]
    knee = study.knee
    if knee is not None:
        out.append(capital(knee_text(knee)) + knee_prediction_text(study) + ".")
    out += noise_scale.findings(study)
    return out


def fit_text(fit: critical_batch_fit.CriticalFit) -> str:
    """S_min, E_min and B_crit with their intervals."""
    return (
        f"S_min = {fit.s_min:,.0f} steps ({interval_text(fit.s_min_ci)}), E_min = "
        f"{fit.e_min:,.0f} samples ({interval_text(fit.e_min_ci)}), B_crit = E_min / S_min ≈ "
        f"{approx(fit.b_crit)} ({interval_text(fit.b_crit_ci)})"
    )


def interval_text(ci: tuple[float, float]) -> str:
    low, high = ci
    if not (math.isfinite(low) or math.isinf(low)) or math.isnan(high):
        return "no interval"
    top = approx(high) if math.isfinite(high) else "∞"
    return f"95 % interval {approx(low)}–{top}"


def fit_findings(study: studies.TargetStudy) -> list[str]:
    """The fitted trade-off S(B) = S_min + E_min / B, and the noise scale near the target."""
    fit, near = study.fit, study.near
    out = []
    if fit is None:
        out.append(
            "No critical batch is fitted: S(B) = S_min + E_min / B needs the LR oracle's "
            "steps at 3 or more batches that reached the target and are not known to be "
            "untuned."
        )
    else:
        left = [
            f"{', '.join(map(str, batches))} ({why})"
            for batches, why in (
                (fit.censored, "no LR reached the target in half its seeds"),
                (fit.untuned, "not tuned: steps fell faster than perfect scaling from it"),
            )
            if batches
        ]
        out.append(
            "Critical batch fitted as McCandlish et al. (2018) define it: S(B) = S_min + "
            f"E_min / B fitted to the LR oracle's seed-median steps at batches "
            f"{', '.join(map(str, fit.batches))} (least squares in relative error"
            + (f"; left out: {'; '.join(left)}" if left else "")
            + f"): {fit_text(fit)}; the intervals resample the seeds of every LR at every "
            f"batch and take the oracle again ({fit.resamples} resamples)."
        )
    if near is None:
        out.append(
            "No gradient noise scale near the target: the LR oracle's runs recorded no window "
            "of B_simple before they reached it."
        )
        return out
    sentence = (
        f"B_simple near the target (the windows of the last {NEAR_PERCENT} of the steps before "
        f"each of the LR oracle's runs reached {pct(study.target, 0)}, pooled per run; median "
        f"over {plural(near.runs, 'run')}): ≈ {approx(near.batch)} "
        f"({interval_text((near.low, near.high))} of the median)"
    )
    if near.without:
        sentence += f"; {plural(near.without, 'run')} without a window before it left out"
    if fit is not None and math.isfinite(fit.b_crit):
        sentence += (
            f". Predicted / fitted B_crit = {near.batch / fit.b_crit:.2g} "
            f"(predicted {approx(near.batch)}, {interval_text((near.low, near.high))}; fitted "
            f"{approx(fit.b_crit)}, {interval_text(fit.b_crit_ci)}): "
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
        sentence = (
            f"Critical batch fitted to the best LR's steps to {pct(study.target, 0)}: B_crit = "
            f"E_min / S_min ≈ {approx(fit.b_crit)} ({interval_text(fit.b_crit_ci)}"
            + (f"; {left_out})" if left_out else ")")
        )
        if near is not None and math.isfinite(fit.b_crit):
            sentence += (
                f"; the gradient noise scale near the target predicts ≈ {approx(near.batch)} "
                f"({interval_text((near.low, near.high))}): predicted / fitted = "
                f"{near.batch / fit.b_crit:.2g}"
            )
        flagged = sorted(set(map(int, study.untuned["global_batch"])) - set(untuned))
        if flagged:
            sentence += (
                f"; an estimate: batch {', '.join(map(str, flagged))} not known to be tuned "
                "(too few LRs, or the best at the edge of those tried)"
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
    return f"Steps to {pct(study.target, 0)} (best LR per batch) {found}{caveat}."
