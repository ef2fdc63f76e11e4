"""Critical batch: the knee of the LR oracle's steps-to-target curve on constructed curves (with
its budget), the noise-scale prediction from the runs that reached the target, predicted / found,
and the sentences for every case."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dpsuite.analysis.report import critical_batch_fit
from dpsuite.analysis.report.sections.steps_to_target.critical_batch import knee_text

NAN = math.nan
INF = math.inf
ROOMY = 10**6  # a budget that never limits


def oracle(steps: dict[int, float], budget: dict[int, float] | float = ROOMY) -> pd.DataFrame:
    """An oracle table (`target_study.oracle`): steps (inf: no LR reached it) and budget."""
    budgets = budget if isinstance(budget, dict) else dict.fromkeys(steps, budget)
    return pd.DataFrame(
        {
            "global_batch": list(steps),
            "steps": list(steps.values()),
            "budget_steps": [budgets[b] for b in steps],
        }
    )


# ---- the knee ------------------------------------------------------------------------------------


def test_knee_interpolated_in_log_space():
    # Perfect scaling from 400 at 32: 200, 100, 50. Ratios 1.0, 1.2, then 3.0 at 256.
    knee = critical_batch_fit.find_knee(oracle({32: 400, 64: 200, 128: 120, 256: 150}))
    assert (knee.base_batch, knee.base_steps, knee.within, knee.beyond) == (32, 400, 128, 256)
    t = (math.log(2) - math.log(1.2)) / (math.log(3) - math.log(1.2))
    assert knee.batch == pytest.approx(128 * 2**t)  # 188.4
    assert knee.perfect(64) == 200 and knee.found and knee.placed


def test_knee_right_after_the_smallest_batch():
    knee = critical_batch_fit.find_knee(
        oracle({32: 100, 64: 200})
    )  # ratio 4 at 64: crosses 2 halfway in log
    assert knee.within == 32 and knee.beyond == 64
    assert knee.batch == pytest.approx(32 * 2**0.5)


def test_exactly_twice_perfect_is_not_beyond():
    knee = critical_batch_fit.find_knee(oracle({32: 400, 64: 400}))
    assert knee.batch is None and knee.within == 64 and not knee.found


def test_no_knee_within_the_batches_measured():
    knee = critical_batch_fit.find_knee(
        oracle({32: 400, 64: 200, 128: 110, 256: 90})
    )  # 90 < 2 x 50
    assert knee.batch is None and knee.beyond is None and knee.unreached is None
    assert knee.within == 256 and knee.placed and not knee.found


def test_no_lr_reaching_the_target_with_room_to_is_beyond_the_knee():
    # At 128 the budget (1000 steps) is 10x perfect scaling (100): missing it is 'beyond 2x'.
    knee = critical_batch_fit.find_knee(oracle({32: 400, 64: 210, 128: INF, 256: 40}, budget=1000))
    assert (knee.within, knee.beyond, knee.unreached, knee.batch) == (64, 128, 128, None)
    assert knee.room == pytest.approx(10) and knee.found


def test_no_lr_reaching_the_target_in_a_short_budget_does_not_place_the_knee():
    # At 128 the budget is 150 steps, 1.5x perfect scaling: a miss there says nothing.
    budget = {32: 1200, 64: 600, 128: 150}
    knee = critical_batch_fit.find_knee(oracle({32: 400, 64: 210, 128: INF}, budget))
    assert knee.unreached == 128 and knee.beyond is None and not knee.placed
    assert knee.room == pytest.approx(1.5)
    unknown = critical_batch_fit.find_knee(
        oracle({32: 400, 64: 210, 128: INF}, NAN)
    )  # older results
    assert unknown.unreached == 128 and not unknown.placed


def test_a_budget_within_twice_perfect_cannot_show_the_knee():
    budget = {32: 600, 64: 300, 128: 150, 256: 75}  # 1.5x perfect scaling at every batch
    knee = critical_batch_fit.find_knee(oracle({32: 400, 64: 210, 128: 120, 256: 70}, budget))
    assert knee.within == 256 and knee.short_budget == 64 and not knee.placed
    assert knee.room == pytest.approx(1.5)


def test_smallest_reaching_batch_is_the_base():
    knee = critical_batch_fit.find_knee(oracle({16: INF, 32: 400, 64: 200, 128: 500}))
    assert knee.base_batch == 32 and knee.within == 64 and knee.beyond == 128


@pytest.mark.parametrize("steps", [{32: 400}, {32: INF, 64: INF}, {}])
def test_no_knee_without_a_batch_above_the_first_that_reached_the_target(steps):
    assert critical_batch_fit.find_knee(oracle(steps)) is None


# ---- predicted / found -------------------------------------------------------------------------


def prediction(batch: float, low: float | None = 120.0, high: float | None = 900.0):
    return critical_batch_fit.Prediction(batch=batch, low=low, high=high, runs=6, pooled=True)


def test_predicted_over_found_for_each_kind_of_knee():
    interpolated = critical_batch_fit.Knee(32, 400.0, within=512, batch=800.0, beyond=1024)
    assert critical_batch_fit.predicted_over_found(400.0, interpolated) == (0.5, 0.5)
    bracketed = critical_batch_fit.Knee(
        32, 400.0, within=512, beyond=1024, unreached=1024, room=8.0
    )
    assert critical_batch_fit.predicted_over_found(400.0, bracketed) == (400 / 1024, 400 / 512)
    above = critical_batch_fit.Knee(32, 400.0, within=2048)
    assert critical_batch_fit.predicted_over_found(400.0, above) == (0.0, 400 / 2048)
    short = critical_batch_fit.Knee(32, 400.0, within=512, unreached=1024, room=1.5)
    assert critical_batch_fit.predicted_over_found(400.0, short) is None


def test_the_knee_the_noise_scale_predicts_is_b_noise_plus_twice_b0():
    # S = S_min (1 + Bn/B): S(B) B / (S(B0) B0) = (B + Bn) / (B0 + Bn); = 2 at B = Bn + 2 B0
    assert critical_batch_fit.predicted_knee(310.0, 32) == 374.0
    s = [1 + 310 / b for b in (32, 374)]
    assert s[1] * 374 / (s[0] * 32) == pytest.approx(2.0)


# ---- the knee in words -------------------------------------------------------------------------

HEAD = "the LR oracle's steps to target stay within 2× perfect scaling up to batch "


def test_knee_sentences():
    assert knee_text(
        critical_batch_fit.Knee(32, 400.0, within=1024, batch=1312.0, beyond=2048)
    ) == (
        "the LR oracle's steps to target leave 2× perfect scaling at global batch ≈ 1,300 "
        "(interpolated in log-log between 1024 and 2048)"
    )
    assert knee_text(
        critical_batch_fit.Knee(32, 400.0, within=256, beyond=512, unreached=512, room=6.0)
    ) == (
        HEAD + "256, and at 512 no LR reached the target within a budget of 6.0× its "
        "perfect-scaling steps: the knee lies between 256 and 512"
    )
    assert knee_text(critical_batch_fit.Knee(32, 400.0, within=256, unreached=512, room=1.7)) == (
        HEAD + "256; at 512 no LR reached the target, but its budget allows only 1.7× the "
        "perfect-scaling steps, so the knee is not placed"
    )
    assert knee_text(
        critical_batch_fit.Knee(32, 400.0, within=256, unreached=512, room=NAN)
    ).endswith("but its budget allows unknown the perfect-scaling steps, so the knee is not placed")
    assert knee_text(critical_batch_fit.Knee(32, 400.0, within=256, short_budget=64, room=1.5)) == (
        HEAD + "256, but from batch 64 on the budget allows at most 1.5× the perfect-scaling "
        "steps, so no batch could leave 2×: this budget cannot measure the knee"
    )
    assert knee_text(critical_batch_fit.Knee(32, 400.0, within=2048)) == (
        HEAD.removesuffix("batch ") + "the largest batch measured (2048), with room in the "
        "budget to leave it: the "
        "knee lies above 2048"
    )


# ---- the prediction ----------------------------------------------------------------------------


def runs_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(
        rows,
        columns=[
            "run_id",
            "lr_rule",
            "global_batch",
            "status",
            "steps_to_target",
            "grad_noise_scale.pooled",
            "grad_noise_scale.mean",
        ],
    )


def epochs_with(values: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "epoch": range(len(values)),
            "samples_seen": [320 * e for e in range(len(values))],
            "grad_noise_scale": values,
        }
    )


def test_prediction_uses_only_the_runs_that_reached_the_target():
    group = runs_frame(
        [
            ("a", "linear_warmup", 32, "complete", 400, 100.0, 90.0),  # pooled
            ("b", "linear_warmup", 64, "complete", 210, NAN, 300.0),  # older: mean over windows
            ("c", "sqrt", 128, "complete", 120, NAN, NAN),  # oldest: mean at the evaluations
            ("d", "naive", 256, "complete", None, 4.0, 4.0),  # missed: a collapsed model
            ("e", "linear", 256, "diverged", None, 1e6, 1e6),
            ("f", "linear", 512, "failed", None, NAN, NAN),  # no result at all
        ]
    )
    epochs = {
        "a": epochs_with([NAN, 50.0, 150.0, 100.0]),
        "b": epochs_with([NAN, -20.0, 200.0, 400.0, 300.0]),  # a negative estimate is noise
        "c": epochs_with([NAN, 400.0, 600.0]),
    }
    trained = critical_batch_fit.trained_runs(group, epochs)
    assert list(trained.runs["run_id"]) == ["a", "b", "c"]
    assert list(trained.runs["gns"]) == [100.0, 300.0, 500.0]
    assert trained.left_out == 2 and trained.reason == "did not reach the target"
    # nearest-rank 10th and 90th percentiles of each run's positive windows
    assert list(trained.runs["gns_low"]) == [50.0, 200.0, 400.0]
    assert list(trained.runs["gns_high"]) == [150.0, 400.0, 600.0]
    pred = critical_batch_fit.predict(trained.runs)
    assert (pred.batch, pred.runs, pred.low, pred.high) == (300.0, 3, 200.0, 400.0)
    assert not pred.pooled  # b and c have no pooled value
    curves = critical_batch_fit.noise_scale_curves(
        trained.runs, epochs, critical_batch_fit.reference_rule(trained.runs)
    )
    assert list(curves[curves["global_batch"] == 64]["epoch"]) == [2, 3, 4]


def test_prediction_without_measurements_is_none():
    group = runs_frame([("x", "naive", 32, "complete", 400, NAN, NAN)])
    trained = critical_batch_fit.trained_runs(group, {})
    assert trained.runs.empty and critical_batch_fit.predict(trained.runs) is None
    assert critical_batch_fit.reference_rule(trained.runs) is None
    pooled = critical_batch_fit.trained_runs(
        runs_frame([("y", "naive", 32, "complete", 400, 80.0, 70.0)]), {}
    )
    pred = critical_batch_fit.predict(pooled.runs)
    assert pred.batch == 80.0 and pred.pooled and pred.low is None and pred.high is None


def test_method_names_the_two_batch_sizes():
    runs = pd.DataFrame({"grad_noise_scale.method": ["halves", "halves", None]})
    assert critical_batch_fit.methods_text(runs).startswith(
        "the gradients of the two halves of each global batch"
    )
    assert (
        critical_batch_fit.methods_text(pd.DataFrame()) == "two batch sizes (method not recorded)"
    )
