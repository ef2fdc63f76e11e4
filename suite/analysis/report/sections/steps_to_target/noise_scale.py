"""The gradient noise scale of a steps-to-target study over training: its plot, and the
critical batch it predicts pooled from the start of training (secondary to the value near the
target, which `critical_batch` sets beside the fitted one), with the runs it leaves out."""

from __future__ import annotations

import functools

import pandas as pd
from matplotlib.figure import Figure

from dpsuite.analysis.report import critical_batch_fit, data, studies
from dpsuite.analysis.report.plots import plain_log_axis, series_color, styled
from dpsuite.analysis.report.section import Plot
from dpsuite.analysis.report.text import approx, capital, plural

PLOTS = ("gradient_noise_scale",)


def plots(
    study: studies.TargetStudy, tree: data.ResultsTree, suffix: str, about: str
) -> list[Plot]:
    """B_simple over training of the reference rule's runs that reached the target."""
    measured, prediction = study.trained.runs, study.prediction
    rule = critical_batch_fit.reference_rule(measured)
    left_out = study.trained.left_out
    how = critical_batch_fit.methods_text(measured)
    if rule is None:
        return []
    return [
        Plot(
            f"gradient_noise_scale{suffix}",
            functools.partial(
                noise_scale_over_training,
                critical_batch_fit.noise_scale_curves(measured, tree.epochs, rule),
                rule,
                prediction.batch if prediction else None,
                f"Gradient noise scale during training{about}",
            ),
            f"Gradient noise scale B_simple over training (`{rule}`){about}",
            "B_simple = tr(Σ)/|G|² (McCandlish et al. 2018, App. A) from two batch sizes: "
            f"{how}. Both estimates are summed over a window of training steps before their "
            f"ratio is taken; each point is the latest window at an evaluation of the `{rule}` "
            "runs that trained, one line per global batch, mean over seeds; windows without a "
            "positive estimate are left out"
            + (
                f", and so are the {plural(left_out, 'run')} that {study.trained.reason}"
                if left_out
                else ""
            )
            + ". Dotted: the median of the runs' B_simple pooled from step 0 (secondary: the "
            "value near the target is in the critical-batch plot).",
        )
    ]


@styled
def noise_scale_over_training(
    curves: pd.DataFrame, rule: str, predicted: float | None, title: str
) -> Figure | None:
    """B_simple against epoch (log y), one line per global batch, seeds averaged."""
    if curves.empty:
        return None
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    seeds = curves.groupby("global_batch")["seeds"].max()
    same = seeds.nunique() == 1  # then the seed count goes in the legend title, once
    for i, (batch, grp) in enumerate(curves.groupby("global_batch", sort=True)):
        n = int(seeds[batch])
        label = f"{int(batch)}" + (f" (mean of {n} seeds)" if n > 1 and not same else "")
        ax.plot(
            grp["epoch"], grp["grad_noise_scale"], "o-", ms=4, color=series_color(i), label=label
        )
    if predicted is not None:
        # In the legend, not on the plot: a label by the line collides with the legend box.
        ax.axhline(
            predicted,
            color="black",
            ls=":",
            lw=1.2,
            label=f"predicted critical batch ≈ {approx(predicted)}",
        )
    plain_log_axis(ax, "y")
    ax.set_xlim(left=0)
    note = f", mean of {int(seeds.iloc[0])} seeds" if same and seeds.iloc[0] > 1 else ""
    # Beside the axes: one line per batch would hide some of the curves.
    ax.legend(
        title=f"global batch ({rule}{note})", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8
    )
    ax.set_xlabel("epoch")
    ax.set_ylabel("gradient noise scale B_simple (samples, log scale)")
    ax.set_title(title)
    return fig


def predicted_text(prediction: critical_batch_fit.Prediction, trained: str) -> str:
    estimate = (
        "pooled over each run's measured steps" if prediction.pooled else "mean over each run"
    )
    spread = (
        f", {approx(prediction.low)}–{approx(prediction.high)} over training "
        f"({critical_batch_fit.BAND[0]}th–{critical_batch_fit.BAND[1]}th percentile)"
        if prediction.low is not None and prediction.high is not None
        else ""
    )
    runs = f"{prediction.runs} run{'s' if prediction.runs > 1 else ''}"
    return (
        f"the gradient noise scale of the {runs} that {trained} (B_simple {estimate}, median "
        f"over runs) predicts a critical batch ≈ {approx(prediction.batch)}{spread}"
    )


def findings(study: studies.TargetStudy) -> list[str]:
    """The critical batch predicted from B_simple pooled from the start; the runs left out."""
    out = []
    prediction = study.prediction
    trained = f"reached {study.target_text}"
    if prediction is not None:
        out.append(
            capital(predicted_text(prediction, trained))
            + "; pooled from step 0, every window weighs by its |G|², the largest early in "
            "training, so this value leans to the start of training: it is secondary to the "
            "value near the target."
        )
    if study.trained.left_out and prediction is not None:
        n = study.trained.left_out
        out.append(
            f"{n} run{'s' if n > 1 else ''} that {study.trained.reason} "
            f"{'are' if n > 1 else 'is'} left out of the noise-scale prediction."
        )
    return out
