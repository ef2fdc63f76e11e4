"""The critical batch's intervals say only what the data can: where seeds cannot vary the answer
(one seed per setting, every seed hitting at the same evaluation) the interval comes from the
evaluation granularity or is not given; untuned batches stay out of the fit; a rounded interval
holds its rounded point; the fit choices' spread; B_crit by target; and loss targets."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpsuite.analysis.report import (
    b_crit_by_target,
    critical_batch_fit,
    fit_choices,
    studies,
    target_study,
    warmup_axis,
)
from dpsuite.analysis.report.sections.steps_to_target import critical_batch
from dpsuite.analysis.report.text import approx

S_MIN, E_MIN = 100.0, 64_000.0  # B_crit 640
BATCHES = [64, 128, 256, 512, 1024]


def exact(batch: int) -> float:
    return S_MIN + E_MIN / batch


def run(batch: int, seed: int, steps: float | None, peak: float, **extra) -> dict:
    """One grid run at base LR 0.1 and base batch 32, evaluated 10 times an epoch."""
    return {
        "run_id": f"lr{peak:g}-b{batch}-s{seed}-w{extra.get('warmup_epochs', 0)}",
        "lr_rule": "power",
        "lr_exponent": 0.5,
        "config.lr_rule.peak_lr": peak,
        "global_batch": batch,
        "seed": seed,
        "status": "complete",
        "steps_to_target": steps,
        "peak_lr": peak,
        "warmup_epochs": 0.0,
        "schedule": "cosine",
        "base_lr": 0.1,
        "base_batch": 32,
        "total_steps": 16 * 64_000 // batch,
        "steps_per_epoch": 64_000 // batch,
        "config.train.evals_per_epoch": 10,
        **extra,
    }


def tuned_group(seeds: int, spread: float = 0.0) -> pd.DataFrame:
    """Three LRs at every batch, the middle one best (so every batch is tuned)."""
    rows = []
    for b in BATCHES:
        s = round(exact(b))
        for factor in (0.5, 1.0, 2.0):
            steps = s if factor == 1.0 else 2 * s
            for seed in range(seeds):
                jitter = 1 + spread * (seed - (seeds - 1) / 2)
                rows.append(run(b, seed, round(steps * jitter), 0.1 * factor * b / 32))
    return pd.DataFrame(rows)


def contains(ci: tuple[float, float], point: float) -> bool:
    return ci[0] <= point <= ci[1] and ci[1] > ci[0]


@pytest.mark.parametrize("seeds", [1, 3])
def test_seeds_that_cannot_vary_the_answer_give_the_evaluation_granularity_range(seeds):
    # one seed, or three seeds all hitting at the same evaluation: no resample differs
    fit = fit_choices.fit_group(tuned_group(seeds))
    assert fit.source == critical_batch_fit.FROM_GRANULARITY and "no bootstrap" in fit.why_not_seeds
    for ci, point in ((fit.b_crit_ci, fit.b_crit), (fit.e_min_ci, fit.e_min)):
        assert contains(ci, point)  # never zero-width, never without its point
    text = critical_batch.fit_text(fit)
    assert "range" in text and "95 %" not in text


def test_without_a_recorded_evaluation_interval_there_is_no_interval():
    group = tuned_group(1).drop(columns=["steps_per_epoch"])
    fit = fit_choices.fit_group(group)
    assert fit.source == critical_batch_fit.NO_INTERVAL and math.isnan(fit.b_crit_ci[0])
    assert "no interval" in critical_batch.fit_text(fit)
    assert "no interval" in critical_batch.interval_source_text(fit)


def test_seeds_that_vary_give_a_bootstrap_interval_that_holds_its_point():
    fit = fit_choices.fit_group(tuned_group(3, spread=0.05))
    assert fit.source == critical_batch_fit.FROM_SEEDS
    assert fit.b_crit == pytest.approx(640, rel=0.01)
    for ci, point in zip(
        (fit.s_min_ci, fit.e_min_ci, fit.b_crit_ci),
        (fit.s_min, fit.e_min, fit.b_crit),
        strict=True,
    ):
        assert contains(ci, point)


def test_an_interval_that_left_out_its_point_is_widened_to_it():
    assert critical_batch_fit.containing((110_000, 112_000), 113_395) == (110_000, 113_395)
    assert critical_batch_fit.containing((1_100, 1_300), 1_200) == (1_100, 1_300)


@pytest.mark.parametrize(
    "point, ci", [(113_395, (113_000, 113_900)), (1_260, (1_255, 1_270)), (56.4, (56.3, 56.6))]
)
def test_a_rounded_interval_holds_its_rounded_point(point, ci):
    # the interval rounds outward: 1,255-1,270 reads 1,200-1,300, not 1,300-1,300
    low, high = critical_batch.interval_text(ci).removeprefix("95 % interval ").split("–")
    value = float(approx(point).replace(",", ""))
    low, high = float(low.replace(",", "")), float(high.replace(",", ""))
    assert low <= value <= high and low < high


def test_untuned_batches_are_left_out_of_the_fit():
    group = tuned_group(3, spread=0.05)
    # at 1024 only the smallest LR tried is kept: the best at the grid's edge, not tuned
    group = group[(group["global_batch"] != 1024) | (group["peak_lr"] < 4)]
    fit = fit_choices.fit_group(group)
    assert 1024 not in fit.batches and fit.untuned == [1024]
    # with only two tuned batches there is no fit at all
    two = group[group["global_batch"].isin([64, 128, 1024])]
    assert fit_choices.fit_group(two) is None


def test_the_spread_names_each_fit_choice():
    group = tuned_group(3, spread=0.05)
    warm = group[group["peak_lr"] > 0.1].assign(warmup_epochs=1.0)
    warm = warm.assign(run_id=warm["run_id"] + "-warm", steps_to_target=warm["steps_to_target"] * 2)
    both = pd.concat([group, warm], ignore_index=True)
    fit = fit_choices.fit_group(both)
    spread = fit_choices.spread(both, fit)
    assert "absolute-error fit" in spread.choices and "without batch 64" in spread.choices
    assert {"warmup settings only", "no-warmup settings only"} <= set(spread.choices)
    assert spread.choices["no-warmup settings only"] == pytest.approx(fit.b_crit)
    assert spread.low <= spread.high


def evaluations(hits: dict[float, int], metric: str = "eval_acc") -> pd.DataFrame:
    """epochs.csv of a run whose metric passes each value at the given step, evaluated every
    10 steps."""
    steps = np.arange(0, 2501, 10)
    values = [max([v for v, s in hits.items() if s <= step], default=0.1) for step in steps]
    if metric == "eval_loss":
        values = [1 - v for v in values]
    return pd.DataFrame({"step": steps, metric: values})


def test_hits_are_recounted_with_the_studys_rule_in_the_targets_direction():
    curve = evaluations({0.6: 50, 0.7: 100, 0.8: 200})
    assert b_crit_by_target.hit_step(curve, 0.6, "eval_acc", 1) == 50
    assert b_crit_by_target.hit_step(curve, 0.7, "eval_acc", 3) == 100  # window's middle
    spike = curve.assign(eval_acc=np.where(curve["step"] == 30, 0.9, curve["eval_acc"]))
    assert (
        b_crit_by_target.hit_step(spike, 0.8, "eval_acc", 3) == 200
    )  # one evaluation does not hit
    assert math.isnan(b_crit_by_target.hit_step(curve, 0.9, "eval_acc", 1))
    loss = evaluations({0.6: 50, 0.7: 100}, "eval_loss")  # loss 0.4 at 50, 0.3 at 100
    assert b_crit_by_target.hit_step(loss, 0.35, "eval_loss", 1) == 100


def test_b_crit_by_target_from_the_evaluations():
    group = tuned_group(1).assign(target_acc=0.75, stops_at_target=True)
    epochs = {}
    for _, r in group.iterrows():
        s = int(r["steps_to_target"]) // 10 * 10
        easy = int(s - E_MIN / 2 / r["global_batch"]) // 10 * 10  # half the examples
        epochs[r["run_id"]] = evaluations({0.6: easy, 0.75: s})
    table = b_crit_by_target.by_target(group, epochs, resamples=50)
    assert list(table["target"]) == [0.55, 0.6, 0.65, 0.7, 0.75]  # none above the study's own
    assert (table["batches"] == len(BATCHES)).all()
    b_crit = table.set_index("target")["b_crit"]
    assert b_crit[0.75] == pytest.approx(640, rel=0.05)
    # half the examples at the same S_min: about half the B_crit (hits rounded to evaluations)
    assert b_crit[0.6] == pytest.approx(b_crit[0.55]) and b_crit[0.6] < 0.7 * b_crit[0.75]


def test_b_simple_is_taken_near_each_target():
    """Each run's noise scale is 100 before its easy hit and 400 after: near the easy target
    B_simple is 100, near the study's own 400 (the windows just before each hit)."""
    group = tuned_group(1).assign(target_acc=0.75, stops_at_target=True)
    epochs = {}
    for _, r in group.iterrows():
        s = int(r["steps_to_target"]) // 10 * 10
        easy = int(s - E_MIN / 2 / r["global_batch"]) // 10 * 10
        curve = evaluations({0.6: easy, 0.75: s})
        window = np.arange(len(curve))  # a new window at every evaluation
        late = curve["step"] > easy
        epochs[r["run_id"]] = curve.assign(
            gns_grad_sq=1.0 + 1e-6 * window, gns_trace=np.where(late, 400.0, 100.0)
        )
    table = b_crit_by_target.by_target(group, epochs, resamples=50).set_index("target")
    assert table.loc[0.6, "b_simple"] == pytest.approx(100, rel=0.01)
    assert table.loc[0.75, "b_simple"] == pytest.approx(400, rel=0.01)
    assert table.loc[0.75, "b_simple_low"] <= 400 <= table.loc[0.75, "b_simple_high"] * 1.01
    cells = critical_batch.near_cells(table.reset_index().iloc[-1])
    assert cells["B_simple near it"] == "400"
    assert cells["B_simple / B_crit"] == f"{400 / table.loc[0.75, 'b_crit']:.2f}"


def test_a_loss_target_is_studied_in_its_own_direction_and_grouped_by_the_target_used():
    base = tuned_group(1).assign(
        target_metric="eval_loss", target_loss=0.3, target_acc=None, stops_at_target=True
    )
    assert target_study.has_target(base)
    assert target_study.target_of(base) == ("eval_loss", 0.3)
    assert b_crit_by_target.targets_for(base) == [0.42, 0.39, 0.36, 0.33, 0.3]
    other = base.assign(target_loss=0.5, run_id=base["run_id"] + "-other")
    parts = studies.by_target_used("g", pd.concat([base, other], ignore_index=True))
    assert [label for label, _ in parts] == ["g, eval loss ≤ 0.3", "g, eval loss ≤ 0.5"]
    assert not target_study.has_target(pd.concat([base, other]))
    accuracy = tuned_group(1).assign(target_acc=0.75)  # older runs: no target_metric column
    assert target_study.target_of(accuracy) == ("eval_acc", 0.75)
    assert list(target_study.reaches(np.array([0.2, 0.4]), 0.3, "eval_loss")) == [True, False]


def test_warmup_is_its_own_axis_of_the_oracle():
    group = tuned_group(3, spread=0.05)
    warm = group[group["peak_lr"] > 0.1].assign(warmup_epochs=1.0)
    # warmup halves the steps at 1024 only, doubles them elsewhere
    factor = np.where(warm["global_batch"] == 1024, 0.5, 2.0)
    warm = warm.assign(
        run_id=warm["run_id"] + "-warm", steps_to_target=warm["steps_to_target"] * factor
    )
    both = pd.concat([group, warm], ignore_index=True)
    settings = target_study.settings_table(both)
    assert "LR 0.4 + warmup" in set(settings["setting"])  # not merged with LR 0.4 without it
    table = warmup_axis.warmup_oracle(both, settings).set_index("global_batch")
    assert table.loc[64, "with_over_without"] == pytest.approx(2.0)
    assert table.loc[1024, "with_over_without"] == pytest.approx(0.5)
    assert table.loc[1024, "lr_with"] == table.loc[1024, "lr_without"] == pytest.approx(3.2)
    assert warmup_axis.warmup_oracle(group, target_study.settings_table(group)).empty


def test_the_by_target_plot_draws_both_series_and_needs_two_points():
    from dpsuite.analysis.report.sections.steps_to_target import by_target_plot

    table = pd.DataFrame(
        {
            "target": [1.5, 1.3, 1.1],
            "b_crit": [4.0, 8.0, math.nan],
            "low": [3.0, 6.0, math.nan],
            "high": [5.0, math.inf, math.nan],
            "b_simple": [2.0, 3.0, 5.0],
            "b_simple_low": [1.5, 2.5, 4.0],
            "b_simple_high": [2.5, 3.5, 6.0],
        }
    )
    fig = by_target_plot.by_target(table, target_study.LOSS, "t")
    (ax,) = fig.axes
    assert ax.xaxis_inverted()  # a lower loss is harder: to the right
    assert len(ax.containers) == 2  # B_crit's two points and B_simple's three, with bars
    lonely = table.assign(b_crit=math.nan, b_simple=[2.0, math.nan, math.nan])
    assert by_target_plot.by_target(lonely, target_study.LOSS, "t") is None
    assert not by_target_plot.worth_drawing(lonely)
