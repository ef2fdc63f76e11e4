"""Bootstrap intervals of medians and of ratios of medians (repeated scaling measurements)."""

from __future__ import annotations

import math

import pytest

from dpsuite.analysis.report import stats


def test_median_interval_brackets_the_median_and_is_reproducible():
    values = [1000.0, 1040.0, 960.0, 1010.0, 990.0]
    low, high = stats.median_ci(values)
    assert 960.0 <= low < 1000.0 < high <= 1040.0
    assert stats.median_ci(values) == (low, high)  # seeded: the same report twice


def test_one_measurement_has_no_interval():
    assert all(math.isnan(v) for v in stats.median_ci([5.0]))
    assert all(math.isnan(v) for v in stats.ratio_ci([5.0], [6.0, 7.0]))
    assert all(math.isnan(v) for v in stats.median_ci([float("nan"), 3.0]))


def test_identical_repeats_give_a_point_interval():
    assert stats.median_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)
    assert stats.ratio_ci([2.0, 2.0, 2.0], [6.0, 6.0, 6.0]) == (3.0, 3.0)


def test_ratio_interval_is_of_b_over_a():
    a, b = [100.0, 104.0, 98.0], [300.0, 310.0, 290.0]
    low, high = stats.ratio_ci(a, b)
    assert low < 300.0 / 100.0 < high
    # resampling never goes outside the extreme ratios of the measured values
    assert low >= 290.0 / 104.0 and high <= 310.0 / 98.0
    assert stats.ratio_ci(b, a) == pytest.approx((1 / high, 1 / low), rel=0.02)


def test_nearest_rank_percentile_is_a_measured_value():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, float("nan")]  # non-finite values are left out
    assert stats.nearest_rank(values, 10) == 1.0  # rank ceil(0.5) = 1
    assert stats.nearest_rank(values, 50) == 3.0
    assert stats.nearest_rank(values, 90) == 5.0  # rank ceil(4.5) = 5
    assert stats.nearest_rank(values, 0) == 1.0 and stats.nearest_rank(values, 100) == 5.0
    assert stats.nearest_rank([1.0, 2.0, 3.0, 4.0], 50) == 2.0  # not the interpolated 2.5
    assert math.isnan(stats.nearest_rank([], 50))
