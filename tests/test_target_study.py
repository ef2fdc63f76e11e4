"""Steps to target on constructed groups: the censored seed median, the runs every rule shares at
the base batch, the LR oracle and each rule's efficiency against it, and time to target from
step times (measured, and from a scaling model beyond)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import pytest

from dpsuite.analysis.report import target_study, time_to_target_table
from dpsuite.analysis.report.sections.steps_to_target import time_to_target

INF = math.inf
BASE_LR = 0.1


def run(
    rule: str,
    batch: int,
    seed: int,
    steps: float | None,
    status: str = "complete",
    exponent: float | None = None,
) -> dict:
    """One run of a study whose base batch is 32 and whose budget is 16 epochs of 6400 samples."""
    power = {"naive": 0.0, "sqrt": 0.5}.get(rule, 1.0) if exponent is None else exponent
    return {
        "run_id": f"{rule}{exponent or ''}-b{batch}-s{seed}",
        "lr_rule": rule,
        "lr_exponent": power,
        "global_batch": batch,
        "seed": seed,
        "status": status,
        "steps_to_target": steps,
        "peak_lr": BASE_LR * (batch / 32) ** power,
        "warmup_epochs": 1.0 if rule in ("linear_warmup", "power") and batch > 32 else 0.0,
        "schedule": "cosine",
        "base_lr": BASE_LR,
        "base_batch": 32,
        "total_steps": 16 * 6400 // batch,
    }


def group(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def seeds(rule: str, batch: int, steps: list[float | None], **kw) -> list[dict]:
    return [run(rule, batch, seed, s, **kw) for seed, s in enumerate(steps)]


def steps_of(settings: pd.DataFrame, setting: str, batch: int) -> float:
    at = settings[(settings["setting"] == setting) & (settings["global_batch"] == batch)]
    assert len(at) == 1, (setting, batch)
    return float(at["steps"].iloc[0])


# ---- the censored median ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps,expected",
    [
        ([100, 120, 110], 110),  # every seed reached it
        ([100, 120, None], 120),  # one of three missed: it still counts, as the largest
        ([100, None, None], INF),  # two of three missed: the median is never
        ([100, None], INF),  # half missed: never, not the one seed that made it
        ([100, 110, None, None], INF),
        ([100, 110, 120, None], 115),
    ],
)
def test_seed_median_counts_a_missed_seed_as_never(steps, expected):
    settings = target_study.settings_table(group(seeds("linear", 64, steps)))
    assert steps_of(settings, "linear", 64) == expected
    row = settings.iloc[0]
    assert (row["seeds"], row["reached"]) == (len(steps), sum(s is not None for s in steps))


def test_a_diverged_seed_is_never_and_a_failed_one_is_not_a_seed():
    rows = [
        run("linear", 64, 0, 100),
        run("linear", 64, 1, None, status="diverged"),
        run("linear", 64, 2, None, status="failed"),  # no result: not counted at all
    ]
    settings = target_study.settings_table(group(rows))
    assert steps_of(settings, "linear", 64) == INF  # one of two missed
    assert settings.iloc[0]["seeds"] == 2


def test_at_the_base_batch_every_rule_is_one_setting_counted_once():
    # At batch 32 naive, linear and sqrt give the base LR without warmup: the same three runs.
    rows = [
        *seeds("naive", 32, [400, 410, 390]),
        *seeds("linear", 32, [400, 410, 390]),
        *seeds("sqrt", 32, [400, 410, 390]),
        *seeds("naive", 64, [300, 310, 320]),
        *seeds("linear", 64, [200, 210, 220]),
    ]
    settings = target_study.settings_table(group(rows))
    base = settings[settings["global_batch"] == 32]
    assert list(base["setting"]) == [target_study.BASE_SETTING]
    assert (base["seeds"].iloc[0], base["steps"].iloc[0]) == (3, 400)
    rules = target_study.rule_table(settings)
    for rule in ("naive", "linear"):  # each rule's curve starts from the shared runs
        curve = rules[rules["lr_rule"] == rule].sort_values("global_batch")
        assert list(curve["global_batch"]) == [32, 64] and curve["steps"].iloc[0] == 400


def test_the_grid_is_named_by_its_exponent_and_is_no_rule():
    rows = [
        *seeds("linear", 64, [200, 200, 200]),
        *seeds("power", 64, [150, 150, 150], exponent=0.6),
    ]
    settings = target_study.settings_table(group(rows))
    assert set(settings["setting"]) == {"linear", "power 0.6"}
    assert set(target_study.rule_table(settings)["lr_rule"]) == {"linear"}


# ---- the LR oracle and each rule's efficiency --------------------------------------------------


def oracle_group() -> pd.DataFrame:
    return group(
        [
            *seeds("naive", 32, [400, 400, 400]),
            *seeds("naive", 64, [300, 300, 300]),
            *seeds("linear", 64, [210, 200, 205]),
            *seeds("power", 64, [260, 260, 260], exponent=0.4),
            *seeds("naive", 128, [None, None, 250]),
            *seeds("linear", 128, [None, 150, None]),
            *seeds("power", 128, [125, 120, 130], exponent=0.4),
            *seeds("naive", 256, [None, None, None]),
            *seeds("linear", 256, [None, None, None], status="diverged"),
        ]
    )


def test_oracle_is_the_fewest_steps_over_every_lr_tried():
    best = target_study.oracle(target_study.settings_table(oracle_group())).set_index(
        "global_batch"
    )
    assert best["steps"].to_dict() == {32: 400, 64: 205, 128: 125, 256: INF}
    assert best.loc[64, "setting"] == "linear" and best.loc[128, "setting"] == "power 0.4"
    assert best.loc[128, "peak_lr"] == pytest.approx(BASE_LR * 4**0.4)
    assert best["tried"].to_dict() == {32: 1, 64: 3, 128: 3, 256: 2}
    assert pd.isna(best.loc[256, "setting"]) and math.isnan(best.loc[256, "peak_lr"])
    assert best.loc[64, "budget_steps"] == 16 * 100


def test_efficiency_is_oracle_steps_over_the_rules_and_zero_where_it_never_reaches():
    settings = target_study.settings_table(oracle_group())
    eff = target_study.efficiency(target_study.rule_table(settings), target_study.oracle(settings))
    table = dict(
        zip(zip(eff["lr_rule"], eff["global_batch"], strict=True), eff["efficiency"], strict=True)
    )
    assert table == pytest.approx(
        {
            ("naive", 32): 1.0,
            ("linear", 32): 1.0,
            ("naive", 64): 205 / 300,
            ("linear", 64): 1.0,
            ("naive", 128): 0.0,  # two of three seeds missed
            ("linear", 128): 0.0,
        }
    )  # and nothing at 256, where no LR reached the target


def test_best_lr_at_the_edge_of_three_or_more_tried_is_flagged():
    rows = [
        *seeds("naive", 64, [300, 300, 300]),
        *seeds("power", 64, [250, 250, 250], exponent=0.5),
        *seeds("linear", 64, [200, 200, 200]),  # the largest LR tried, and the best
        *seeds("naive", 128, [300, 300, 300]),
        *seeds("power", 128, [150, 150, 150], exponent=0.5),  # in the middle
        *seeds("linear", 128, [200, 200, 200]),
    ]
    best = target_study.oracle(target_study.settings_table(group(rows))).set_index("global_batch")
    assert best["at_grid_edge"].to_dict() == {64: True, 128: False}


# ---- time to target ------------------------------------------------------------------------------


@dataclass
class LinearModel:
    """A stand-in for the scaling model: 10 ms per step plus 1 ms per worker."""

    validated_max: int = 4

    def step_s(self, n: int, batch: int) -> float:
        return 0.010 + 0.001 * n


def scaling_runs() -> pd.DataFrame:
    rows = [
        (1, 32, 0.010, False),
        (2, 32, 0.012, False),
        (2, 32, 0.014, False),  # a repeat: the median is 13 ms
        (4, 32, 0.016, True),
        (1, 64, 0.018, False),
    ]
    frame = pd.DataFrame(rows, columns=["workers", "per_worker_batch", "step_time_s", "over"])
    return frame.rename(columns={"over": "oversubscribed"}).assign(
        machine="m", workload="w", mode="ddp", status="complete", sync="allreduce"
    )


def test_measured_step_time_is_the_median_per_point():
    measured = time_to_target_table.measured_steps(scaling_runs(), "m", "w")
    assert measured.set_index(["workers", "per_worker_batch"])["step_time_s"].to_dict() == {
        (1, 32): 0.010,
        (1, 64): 0.018,
        (2, 32): pytest.approx(0.013),
        (4, 32): 0.016,
    }
    assert time_to_target_table.measured_steps(scaling_runs(), "m", "other").empty


def test_time_to_target_joins_steps_with_measured_and_modelled_step_times():
    measured = time_to_target_table.measured_steps(scaling_runs(), "m", "w")
    table = time_to_target_table.step_time_table(measured, LinearModel(), [32, 64, 128, 256])
    points = table.set_index(["workers", "per_worker_batch"])
    assert points.loc[(2, 32), "measured"] and points.loc[(2, 32), "step_time_s"] == pytest.approx(
        0.013
    )
    assert not points.loc[(8, 32), "measured"] and points.loc[(8, 32), "extrapolated"]
    assert points.loc[(8, 32), "step_time_s"] == pytest.approx(0.018)
    assert not points.loc[(2, 64), "extrapolated"]  # within the validated 4 workers
    assert points.loc[(4, 32), "oversubscribed"]
    assert points["source"].to_dict() == {
        (1, 32): "measured",
        (2, 32): "measured",
        (4, 32): "oversubscribed",  # measured under contention: kept apart
        (8, 32): "model",
        (1, 64): "measured",
        (2, 64): "model",
        (4, 64): "model",
    }
    steps = pd.DataFrame(
        {
            "curve": [time_to_target_table.ORACLE] * 4 + ["naive"] * 4,
            "global_batch": [32, 64, 128, 256] * 2,
            "steps": [400, 200, 100, 60, 400, 300, INF, INF],
        }
    )
    times = time_to_target_table.time_table(steps, table)
    assert not (times["curve"].eq("naive") & times["global_batch"].ge(128)).any()  # never
    at = times.set_index(["curve", "workers", "per_worker_batch"])["time_s"]
    assert at[(time_to_target_table.ORACLE, 2, 32)] == pytest.approx(200 * 0.013)
    assert at[(time_to_target_table.ORACLE, 8, 32)] == pytest.approx(60 * 0.018)
    best = time_to_target_table.fastest(times, time_to_target_table.ORACLE)
    # 4 x 32 (100 steps of 16 ms: 1.6 s) is oversubscribed, never the fastest measured; of the
    # rest 2 x 32 is: 200 steps of 13 ms = 2.6 s (1 x 32: 4.0 s, 1 x 64: 200 x 18 ms = 3.6 s)
    assert (best.measured["workers"], best.measured["per_worker_batch"]) == (2, 32)
    assert best.measured["time_s"] == pytest.approx(2.6)
    # faster, from the model: 4 workers x 64 is global batch 256, 60 steps of 14 ms
    assert (best.predicted["workers"], best.predicted["per_worker_batch"]) == (4, 64)
    assert best.predicted["time_s"] == pytest.approx(60 * 0.014)
    slow = time_to_target_table.fastest(times, "naive")
    assert slow.measured["time_s"] == pytest.approx(min(400 * 0.010, 300 * 0.013, 300 * 0.018))
    assert slow.predicted is None  # the model's points are slower
    assert (
        time_to_target.point(best.measured) == "2 workers × 32"
        and time_to_target.seconds(1.6) == "1.6 s"
    )


def test_without_a_model_only_measured_points_have_a_time():
    measured = time_to_target_table.measured_steps(scaling_runs(), "m", "w")
    table = time_to_target_table.step_time_table(measured, None, [32, 64, 128, 256])
    assert table["measured"].all()
    points = set(zip(table["workers"], table["per_worker_batch"], strict=True))
    assert points == {(1, 32), (2, 32), (4, 32), (1, 64)}


@pytest.mark.parametrize(
    "source,extrapolated,says",
    [
        (time_to_target_table.MEASURED, False, "measured"),
        (time_to_target_table.OVERSUBSCRIBED, False, "oversubscribed"),
        (time_to_target_table.MODEL, False, "model"),
        (time_to_target_table.MODEL, True, "model, extrapolated"),
    ],
)
def test_the_time_table_says_where_each_step_time_comes_from(source, extrapolated, says):
    row = pd.Series({"source": source, "extrapolated": extrapolated})
    assert time_to_target.step_time_source(row) == says
