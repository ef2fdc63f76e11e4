"""One throughput: step time and samples/s from the median step, with its interval and outliers."""

import math

import pytest
import torch

from dpsuite.measure.step_timer import StepTimeProbe, median_interval, steady_state


def test_one_slow_step_moves_neither_the_step_time_nor_the_throughput():
    steps = [0.001] * 40 + [0.1]  # one step 100 x the others (a page fault, another process)
    m = steady_state(steps, global_batch=32)
    assert m["step_time_s"] == 0.001
    assert m["samples_per_s"] == pytest.approx(32 / 0.001)
    assert m["outlier_steps"] == 1
    assert m["step_time_ci_low_s"] == m["step_time_ci_high_s"] == 0.001
    # what the sum of step times said: under a third of it, from one step in 41
    assert len(steps) * 32 / sum(steps) < m["samples_per_s"] / 3


def test_the_probe_reports_the_throughput_of_its_median_step():
    probe = StepTimeProbe(torch.device("cpu"), warmup=0, global_batch=64, workers=2, period=1)
    probe.timer.durations = [0.002] * 19 + [0.2]
    probe.timer.steps = list(range(20))
    m = probe.metrics()
    assert m["step_time_s"] == 0.002 and m["samples_per_s"] == pytest.approx(64 / 0.002)
    assert m["samples_per_s_per_worker"] == pytest.approx(m["samples_per_s"] / 2)
    assert m["outlier_steps"] == 1 and m["timed_steps"] == 20


def test_the_median_interval_is_the_order_statistics_of_the_binomial_table():
    # n = 100: the 40th and 61st values (P(B <= 39) = 0.018, P(B <= 40) = 0.028)
    assert median_interval([float(i) for i in range(1, 101)]) == (40.0, 61.0)
    assert median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # 6: the extremes
    assert median_interval([2.0]) == (2.0, 2.0)
    low, high = median_interval([float(i) for i in range(20001)])
    assert low < 10000 < high and high - 10000 == 10000 - low and 10000 - low < 200


def test_no_timed_step_measures_nothing():
    m = steady_state([], global_batch=8)
    assert m["samples_per_s"] is None and m["step_time_s"] is None and m["outlier_steps"] == 0
    assert not any(isinstance(v, float) and math.isnan(v) for v in m.values())
