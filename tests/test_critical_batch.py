"""Critical batch: the steps-to-target knee on constructed curves, the noise-scale prediction,
and the finding sentence for every case."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from suite.analysis.report import critical_batch as cb
from suite.analysis.report.findings import critical_batch_findings

NAN = math.nan


def best(steps: dict[int, float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "global_batch": list(steps),
            "steps_to_target": list(steps.values()),
            "lr_rule": ["linear_warmup"] * len(steps),
        }
    )


def test_knee_interpolated_in_log_space():
    # Perfect scaling from 400 at 32: 200, 100, 50. Ratios 1.0, 1.2, then 3.0 at 256.
    knee = cb.find_knee(best({32: 400, 64: 200, 128: 120, 256: 150}))
    assert (knee.base_batch, knee.base_steps, knee.within, knee.beyond) == (32, 400, 128, 256)
    t = (math.log(2) - math.log(1.2)) / (math.log(3) - math.log(1.2))
    assert knee.batch == pytest.approx(128 * 2**t)  # 188.4
    assert knee.perfect(64) == 200


def test_knee_right_after_the_smallest_batch():
    knee = cb.find_knee(best({32: 100, 64: 200}))  # ratio 4 at 64: crosses 2 halfway in log
    assert knee.within == 32 and knee.beyond == 64
    assert knee.batch == pytest.approx(32 * 2**0.5)


def test_exactly_twice_perfect_is_not_beyond():
    knee = cb.find_knee(best({32: 400, 64: 400}))
    assert knee.batch is None and knee.within == 64 and knee.unreached is None


def test_never_leaves_twice_perfect_scaling():
    knee = cb.find_knee(best({32: 400, 64: 200, 128: 110, 256: 90}))  # 90 < 2 x 50
    assert knee.batch is None and knee.beyond is None
    assert knee.within == 256 and knee.unreached is None


def test_target_not_reached_stops_the_curve():
    # 64 within 2x; nobody reached the target at 128, so 256's value does not count.
    knee = cb.find_knee(best({32: 400, 64: 210, 128: NAN, 256: 40}))
    assert knee.batch is None and knee.within == 64 and knee.unreached == 128


def test_smallest_reaching_batch_is_the_base():
    knee = cb.find_knee(best({16: NAN, 32: 400, 64: 200, 128: 500}))
    assert knee.base_batch == 32 and knee.within == 64 and knee.beyond == 128


@pytest.mark.parametrize("steps", [{32: 400}, {32: 400, 64: NAN}, {32: NAN, 64: NAN}, {}])
def test_no_knee_without_two_batches_reaching_the_target(steps):
    assert cb.find_knee(best(steps)) is None


def test_best_steps_is_the_lowest_seed_median_over_rules():
    group = pd.DataFrame(
        {
            "lr_rule": ["a", "a", "b", "a", "b", "a", "b"],
            "global_batch": [32, 32, 32, 64, 64, 128, 128],
            "steps_to_target": [100, 300, 250, 90, 80, None, None],
        }
    )
    table = cb.best_steps(group)
    assert list(table["global_batch"]) == [32, 64, 128]
    assert table["steps_to_target"].iloc[:2].tolist() == [200, 80]  # a: median(100, 300)
    assert table["lr_rule"].iloc[:2].tolist() == ["a", "b"]
    assert math.isnan(table["steps_to_target"].iloc[2]) and pd.isna(table["lr_rule"].iloc[2])


# ---- prediction -------------------------------------------------------------------------------


def runs_frame(rows: list[tuple[str, str, int, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        rows,
        columns=["run_id", "lr_rule", "global_batch", "grad_noise_scale.mean", "status"],
    )


def epochs_with(values: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "epoch": range(len(values)),
            "samples_seen": [320 * e for e in range(len(values))],
            "grad_noise_scale": values,
        }
    )


def test_prediction_is_the_median_training_mean_of_the_reference_rule():
    group = runs_frame(
        [
            ("w1", "linear_warmup", 32, 100.0, "complete"),
            ("w2", "linear_warmup", 64, 300.0, "complete"),
            ("w3", "linear_warmup", 128, NAN, "complete"),  # run.json lacks it: epochs mean
            ("w4", "linear_warmup", 256, 1e6, "diverged"),  # not a complete run
            ("n1", "naive", 32, 5.0, "complete"),  # another rule
        ]
    )
    epochs = {
        "w1": epochs_with([NAN, 50.0, 150.0]),
        "w2": epochs_with([NAN, -20.0, 200.0, 400.0]),  # a negative estimate is noise
        "w3": epochs_with([NAN, 400.0, 600.0]),
    }
    measured = cb.noise_scale_runs(group, epochs)
    assert set(measured["run_id"]) == {"w1", "w2", "w3", "n1"}
    rule = cb.reference_rule(measured)
    assert rule == "linear_warmup"
    pred = cb.predict(measured, rule)
    assert (pred.batch, pred.runs) == (300.0, 3)  # median of 100, 300, 500
    assert (pred.low, pred.high) == (200.0, 400.0)  # medians of (50, 200, 400), (150, 400, 600)
    curves = cb.noise_scale_curves(measured, epochs, rule)
    assert len(curves) == 6 and (curves["grad_noise_scale"] > 0).all()
    assert list(curves[curves["global_batch"] == 64]["epoch"]) == [2, 3]


def test_prediction_falls_back_to_another_rule_and_to_none():
    group = runs_frame([("s", "sqrt", 32, 80.0, "complete"), ("n", "naive", 32, 40.0, "complete")])
    measured = cb.noise_scale_runs(group, {})
    assert cb.reference_rule(measured) == "naive"
    pred = cb.predict(measured, "naive")
    assert pred.batch == 40.0 and pred.low is None and pred.high is None
    nothing = cb.noise_scale_runs(runs_frame([("x", "naive", 32, NAN, "complete")]), {})
    assert nothing.empty and cb.reference_rule(nothing) is None
    assert cb.predict(nothing, None) is None


# ---- the finding sentence ---------------------------------------------------------------------

PRED = cb.Prediction(batch=410.0, low=120.0, high=900.0, rule="linear_warmup", runs=6)
HEAD = (
    "Predicted critical batch (gradient noise scale B_simple, median training mean of 6 "
    "`linear_warmup` runs) ≈ 410, 120–900 over training; the steps-to-target curve (best LR rule "
    "per batch) "
)


def test_finding_knee_found():
    knee = cb.Knee(32, 400.0, within=1024, batch=1312.0, beyond=2048)
    assert critical_batch_findings(PRED, knee, best({32: 400})) == [
        HEAD + "leaves perfect scaling by 2× at batch ≈ 1,300: the prediction is a factor of 3.2 "
        "below it (within an order of magnitude, as McCandlish et al. report)."
    ]
    far = cb.Knee(32, 400.0, within=4096, batch=8192.0, beyond=8192)
    high = cb.Prediction(batch=100_000.0, low=None, high=None, rule="sqrt", runs=1)
    assert critical_batch_findings(high, far, best({32: 400})) == [
        "Predicted critical batch (gradient noise scale B_simple, median training mean of 1 "
        "`sqrt` run) ≈ 100,000; the steps-to-target curve (best LR rule per batch) leaves "
        "perfect scaling by 2× at batch ≈ 8,200: the prediction is a factor of 12.2 above it "
        "(more than an order of magnitude; McCandlish et al. report agreement within one)."
    ]


def test_finding_knee_above_the_largest_batch():
    knee = cb.Knee(32, 400.0, within=2048)
    assert critical_batch_findings(PRED, knee, best({32: 400})) == [
        HEAD + "stays within 2× of perfect scaling up to the largest batch measured (2048), so its "
        "knee lies above 2048: the prediction is at least 5.0× low."
    ]
    knee = cb.Knee(32, 400.0, within=256)
    assert critical_batch_findings(PRED, knee, best({32: 400}))[0].endswith(
        "so its knee lies above 256, consistent with the prediction."
    )


def test_finding_target_not_reached():
    knee = cb.Knee(32, 400.0, within=256, unreached=512)
    assert critical_batch_findings(PRED, knee, best({32: 400})) == [
        HEAD + "stays within 2× of perfect scaling up to batch 256 and no run reached the target "
        "at batch 512, so its knee lies above 256, consistent with the prediction."
    ]


def test_finding_without_noise_scale():
    knee = cb.Knee(32, 400.0, within=1024, batch=1312.0, beyond=2048)
    assert critical_batch_findings(None, knee, best({32: 400})) == [
        "The steps-to-target curve (best LR rule per batch) leaves perfect scaling by 2× at "
        "batch ≈ 1,300; no gradient noise scale was recorded in these runs, so there is no "
        "predicted critical batch to compare it with."
    ]


def test_finding_without_a_knee():
    head = HEAD.split("; the steps")[0]
    one = best({32: 400, 64: NAN})
    assert critical_batch_findings(PRED, None, one) == [
        head + "; only batch 32 reached the target accuracy, so there is no empirical knee to "
        "compare."
    ]
    assert critical_batch_findings(PRED, None, best({32: NAN})) == [
        head + "; no run reached the target accuracy, so there is no empirical knee to compare."
    ]
    assert critical_batch_findings(None, None, one) == []
