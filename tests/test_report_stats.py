"""Bootstrap intervals of medians and of ratios of medians (repeated scaling measurements)."""

from __future__ import annotations

import math

import numpy as np
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


def _scipy_interval(samples, statistic, seed=stats.SEED):
    pytest.importorskip("scipy", minversion="1.17")  # whose quantiles the intervals are
    import scipy.stats as scipy_stats

    result = scipy_stats.bootstrap(
        samples,
        statistic,
        confidence_level=stats.CONFIDENCE,
        n_resamples=stats.RESAMPLES,
        method="percentile",
        paired=False,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@pytest.mark.parametrize("seed", range(6))
def test_intervals_are_scipys_to_the_last_digit(seed):
    """The bootstrap is computed here without importing scipy.stats; it must give exactly what
    scipy's percentile bootstrap gives (a committed report's numbers must not move)."""
    rng = np.random.default_rng(100 + seed)
    a = rng.normal(1000.0, 40.0, size=2 + 9 * seed)
    b = rng.lognormal(6.0, 0.3, size=3 + 11 * seed)
    if seed == 5:  # ties, as repeated timings to a microsecond have
        a, b = np.round(a, -1), np.round(b, -2)
    assert stats.median_ci(a, seed=seed) == _scipy_interval((a,), np.median, seed)

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    assert stats.ratio_ci(a, b) == _scipy_interval((a, b), ratio)


def test_linear_quantiles_interpolate_between_ordered_values():
    values = np.array([4.0, 1.0, 3.0, 2.0, 5.0])
    assert list(stats.linear_quantiles(values, np.array([0.0, 0.5, 0.125, 1.0]))) == [
        1.0,
        3.0,
        1.5,
        5.0,
    ]
    assert np.isnan(stats.linear_quantiles(np.array([1.0, np.nan]), np.array([0.5]))).all()
