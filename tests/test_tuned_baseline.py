"""The steps-to-target study checks its own baseline and fits the critical batch, on constructed
numbers whose answers are derived by hand: the fit of S(B) = S_min + E_min / B, steps falling
faster than perfect scaling, too few LRs or the best at the grid's edge, the noise scale near
the target, and the moving-median hitting time of a run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpsuite.analysis.report import critical_batch_fit, target_study
from dpsuite.engine.train import target_hit, training_metrics

INF = math.inf


def run(batch: int, seed: int, steps: float | None, peak: float, rule: str = "power") -> dict:
    """One run of a study at base LR 0.1 and base batch 32; grid runs carry an absolute peak."""
    return {
        "run_id": f"{rule}-{peak:g}-b{batch}-s{seed}",
        "lr_rule": rule,
        "lr_exponent": 0.5 if rule == "power" else 0.0,
        "config.lr_rule.peak_lr": peak if rule == "power" else math.nan,
        "global_batch": batch,
        "seed": seed,
        "status": "complete",
        "steps_to_target": steps,
        "peak_lr": peak,
        "warmup_epochs": 1.0 if rule == "power" and peak > 0.1 else 0.0,
        "schedule": "cosine",
        "base_lr": 0.1,
        "base_batch": 32,
        "total_steps": 16 * 6400 // batch,
    }


def runs(batch: int, peak: float, steps: list[float | None], rule: str = "power") -> list[dict]:
    return [run(batch, seed, s, peak, rule) for seed, s in enumerate(steps)]


def study(rows: list[dict]) -> tuple[pd.DataFrame, dict]:
    group = pd.DataFrame(rows)
    return target_study.oracle(target_study.settings_table(group)).set_index(
        "global_batch"
    ), target_study.seed_steps(group)


# ---- the grid of absolute LRs ------------------------------------------------------------------


def test_grid_settings_are_named_by_their_peak_lr_and_only_the_base_lr_is_the_base_recipe():
    rows = [
        *runs(32, 0.1, [2750, 2700, 2800], rule="naive"),  # the base recipe
        *runs(32, 0.05, [2000, 2100, 2000]),  # tried at the base batch: a setting of its own
        *runs(32, 0.2, [3000, 3100, 2900]),
        *runs(32, 0.025, [2500, 2400, 2600]),
    ]
    settings = target_study.settings_table(pd.DataFrame(rows))
    assert set(settings["setting"]) == {target_study.BASE_SETTING, "LR 0.025", "LR 0.05", "LR 0.2"}
    best = target_study.oracle(settings).set_index("global_batch")
    assert best.loc[32, "setting"] == "LR 0.05" and best.loc[32, "steps"] == 2000
    assert best.loc[32, "lrs"] == 4 and not best.loc[32, "at_grid_edge"]


# ---- too few LRs, or the best at the edge ------------------------------------------------------


def test_too_few_lrs_and_the_best_at_the_edge_are_flagged():
    rows = [
        *runs(32, 0.1, [400, 400, 400], rule="naive"),  # one LR: too few, not "at the edge"
        *runs(64, 0.1, [300, 300, 300], rule="naive"),  # two LRs: too few, and best at the edge
        *runs(64, 0.2, [250, 250, 250]),
        *runs(128, 0.1, [300, 300, 300]),  # three: the best in the middle, tuned
        *runs(128, 0.2, [150, 150, 150]),
        *runs(128, 0.4, [200, 200, 200]),
        *runs(256, 0.1, [300, 300, 300]),  # three: the best the largest, at the edge
        *runs(256, 0.2, [150, 150, 150]),
        *runs(256, 0.4, [90, 90, 90]),
        *runs(256, 0.4, [95, 95, 95], rule="linear"),  # the same LR again is no new LR
    ]
    best, _ = study(rows)
    assert best["lrs"].to_dict() == {32: 1, 64: 2, 128: 3, 256: 3}
    assert best["too_few_lrs"].to_dict() == {32: True, 64: True, 128: False, 256: False}
    assert best["at_grid_edge"].to_dict() == {32: False, 64: True, 128: False, 256: True}
    flagged = target_study.untuned(best.reset_index())
    assert list(flagged["global_batch"]) == [32, 64, 256]


def test_a_study_warns_about_every_batch_it_cannot_vouch_for():
    from dpsuite.analysis.report import studies

    rows = [*runs(32, 0.1, [400, 400, 400], rule="naive"), *runs(64, 0.1, [210, 200, 205])]
    rows += runs(64, 0.2, [300, 300, 300]) + runs(64, 0.4, [350, 350, 350])
    best, _ = study(rows)
    fake = studies.TargetStudy.__new__(studies.TargetStudy)
    object.__setattr__(fake, "label", "g")
    object.__setattr__(fake, "untuned", target_study.untuned(best.reset_index()))
    assert fake.warnings() == [
        "steps to target (g): global batch 32 is not known to be tuned: only 1 LR tried",
        "steps to target (g): global batch 64 is not known to be tuned: its best LR (0.1) is "
        "at the edge of the LRs tried",
    ]


# ---- faster than perfect scaling ---------------------------------------------------------------


def test_steps_falling_below_half_beyond_the_seeds_spread_flag_the_smaller_batch():
    rows = [
        # 32 -> 64: median 2750 -> 1000 (0.36x); every seed at 64 (<= 1062) is below half of
        # every seed at 32 (>= 2625 / 2 = 1312.5): flagged
        *runs(32, 0.1, [2750, 2625, 3250], rule="naive"),
        *runs(64, 0.1, [1000, 1062, 1000]),
        # 64 -> 128: median 1000 -> 490 (0.49x), but the slowest seed at 128 (560) is above
        # half the fastest at 64 (500): within the seeds' spread, not flagged
        *runs(128, 0.2, [490, 480, 560]),
        # 128 -> 256: 490 -> 300, slower than perfect: not flagged
        *runs(256, 0.2, [300, 310, 290]),
    ]
    best, seeds = study(rows)
    faster = target_study.faster_than_perfect(best.reset_index(), seeds)
    assert faster.to_dict("records") == [
        {
            "global_batch": 32,
            "double": 64,
            "steps": 2750.0,
            "double_steps": 1000.0,
            "ratio": pytest.approx(1000 / 2750),
        }
    ]


def test_a_censored_seed_keeps_the_pair_within_the_spread():
    rows = [*runs(32, 0.1, [2750, 2625, 3250], rule="naive"), *runs(64, 0.1, [1000, 1000, None])]
    best, seeds = study(rows)
    assert target_study.faster_than_perfect(
        best.reset_index(), seeds
    ).empty  # a seed at 64 never got there


# ---- B_crit fitted -----------------------------------------------------------------------------

S_MIN, E_MIN = 100.0, 64_000.0  # B_crit = 640
BATCHES = [32, 64, 128, 256, 512, 1024, 2048]


def exact(batch: int) -> float:
    return S_MIN + E_MIN / batch  # 2100, 1100, 600, 350, 225, 162.5, 131.25


def test_the_fit_recovers_s_min_and_e_min_of_an_exact_curve():
    assert critical_batch_fit.fit_steps(
        np.array(BATCHES), np.array([exact(b) for b in BATCHES])
    ) == (
        pytest.approx(S_MIN),
        pytest.approx(E_MIN),
    )
    # two points fix it by hand: 2100 = s + e/32, 1100 = s + e/64 -> e = 64,000, s = 100
    assert critical_batch_fit.fit_steps(np.array([32, 64]), np.array([2100.0, 1100.0])) == (
        pytest.approx(100.0),
        pytest.approx(64_000.0),
    )
    assert (
        critical_batch_fit.b_crit_of(S_MIN, E_MIN) == 640
        and critical_batch_fit.b_crit_of(-5.0, E_MIN) == INF
    )


def test_fitted_b_crit_with_seeds_censored_and_untuned_batches_left_out():
    rows = []
    for b in BATCHES:
        s = exact(b)
        rows += runs(b, 0.1 * math.sqrt(b / 32), [0.95 * s, s, 1.05 * s])  # median: exact
        rows += runs(b, 0.2 * math.sqrt(b / 32), [2 * s, 2 * s, 2 * s])  # a worse LR
    rows += runs(32, 0.1, [9000, 9000, 9000], rule="naive")  # the base recipe, untuned: worse
    rows += runs(4096, 2.0, [None, None, 200])  # no LR reached it in half its seeds
    best, seeds = study(rows)
    fit = critical_batch_fit.fit_critical_batch(best.reset_index(), seeds, exclude={32})
    assert fit.batches == BATCHES[1:] and fit.untuned == [32] and fit.censored == [4096]
    assert (fit.s_min, fit.e_min, fit.b_crit) == (
        pytest.approx(S_MIN),
        pytest.approx(E_MIN),
        pytest.approx(640),
    )
    low, high = fit.b_crit_ci
    assert low < 640 < high and high / low < 2  # seeds within +-5 %
    assert fit.s_min_ci[0] <= S_MIN <= fit.s_min_ci[1]
    assert fit.resamples == critical_batch_fit.FIT_RESAMPLES and fit.steps(640) == pytest.approx(
        200
    )
    again = critical_batch_fit.fit_critical_batch(best.reset_index(), seeds, exclude={32})
    assert again.b_crit_ci == fit.b_crit_ci  # seeded: the same results, the same interval


def test_no_fit_without_three_batches():
    rows = runs(64, 0.1, [1100] * 3) + runs(128, 0.1, [600] * 3) + runs(256, 0.1, [None] * 3)
    best, seeds = study(rows)
    assert critical_batch_fit.fit_critical_batch(best.reset_index(), seeds) is None


# ---- B_simple near the target ------------------------------------------------------------------


def curve(rows: list[tuple[int, float, float]]) -> pd.DataFrame:
    """epochs.csv rows: step, and the latest window's |G|^2 and tr(Sigma) at that evaluation."""
    return pd.DataFrame(rows, columns=["step", "gns_grad_sq", "gns_trace"])


def near(evals: pd.DataFrame, hit_step: float) -> float:
    """B_simple near the target of one run whose evaluations are ``evals``."""
    return critical_batch_fit.run_near_target({"run": evals}, "run", hit_step)


def test_near_target_pools_the_windows_of_the_last_quarter_before_the_target():
    evals = curve(
        [
            (0, math.nan, math.nan),  # before the first window
            (100, 4.0, 400.0),  # B = 100: early, left out
            (200, 2.0, 400.0),  # B = 200: before step 300, left out
            (300, 1.0, 300.0),  # in the last quarter of 400 steps
            (320, 1.0, 300.0),  # the same window seen again: counted once
            (400, 1.0, 500.0),  # the window before the target
            (420, 1.0, 9999.0),  # after the target: left out
        ]
    )
    # (300 + 500) / (1 + 1) = 400, not the mean of the ratios (300 and 500) nor from the start
    assert near(evals, 400) == pytest.approx(400.0)
    # no window in the last quarter: the last window before the target
    assert near(evals.iloc[:3], 400) == pytest.approx(200.0)
    assert math.isnan(near(evals.iloc[:1], 400))
    assert math.isnan(near(evals, INF))


def test_near_target_prediction_is_the_median_over_the_oracle_runs():
    epochs = {
        "a": curve([(90, 1.0, 100.0)]),
        "b": curve([(90, 1.0, 300.0)]),
        "c": curve([(90, 1.0, 200.0)]),
        "d": curve([]),  # reached the target before its first window closed
    }
    oracle_runs = pd.DataFrame({"run_id": list("abcd"), "steps": [100.0] * 4})
    near = critical_batch_fit.predict_near_target(oracle_runs, epochs)
    assert (near.batch, near.runs, near.without) == (200.0, 3, 1)
    assert 100.0 <= near.low <= 200.0 <= near.high <= 300.0


# ---- the hitting time of a run -----------------------------------------------------------------


def log(accs: list[float]) -> list[dict]:
    return [
        {"step": 100 * i, "epoch": i / 10, "eval_acc": a, "train_loss": 1.0}
        for i, a in enumerate(accs)
    ]


def test_one_noisy_evaluation_neither_reaches_the_target_nor_misses_it():
    noisy = log([0.60, 0.748, 0.705, 0.756, 0.74, 0.76, 0.77])
    assert target_hit(noisy, 0.75, 1)["step"] == 300  # the first evaluation at 75 %: 0.756
    # median of 3 consecutive evaluations, counted at the middle one: (0.705, 0.756, 0.74) ->
    # 0.74 and (0.756, 0.74, 0.76) -> 0.756 >= 0.75: evaluation 4 (step 400)
    assert target_hit(noisy, 0.75, 3)["step"] == 400
    dip = log([0.60, 0.76, 0.70, 0.77, 0.78])  # one low evaluation after reaching it
    assert target_hit(dip, 0.75, 3)["step"] == 200  # (0.76, 0.70, 0.77) -> 0.76
    assert target_hit(log([0.6, 0.8]), 0.75, 3) is None  # never 3 evaluations
    metrics = training_metrics(noisy, 600, 0.75, 3)
    assert (metrics["steps_to_target"], metrics["epochs_to_target"]) == (400, 0.4)
