"""Medians of repeated measurements with percentile-bootstrap confidence intervals, and
nearest-rank percentiles (a value that was measured, as `dpsuite.measure.step_timer` takes them).

A scaling point is measured `repeat` times; its throughput is the median of the repeats and its
interval the bootstrap interval of that median. A ratio between two machines resamples each
machine's repeats independently. The generator is seeded: the same results give the same
intervals in every report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


def _interval(
    samples: tuple[np.ndarray, ...], statistic, seed: int = SEED, resamples: int = RESAMPLES
) -> tuple[float, float]:
    if any(len(s) < 2 for s in samples):  # one measurement has no spread to resample
        return math.nan, math.nan
    result = stats.bootstrap(
        samples,
        statistic,
        confidence_level=CONFIDENCE,
        n_resamples=resamples,
        method="percentile",
        paired=False,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return float(ci.low), float(ci.high)


def median_ci(
    values: Iterable[float], seed: int = SEED, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """The interval of the median of ``values``; (nan, nan) with fewer than two of them."""
    return _interval((_finite(values),), np.median, seed, resamples)


def ratio_ci(a: Iterable[float], b: Iterable[float]) -> tuple[float, float]:
    """The interval of median(b) / median(a); (nan, nan) unless both have two values or more."""

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    return _interval((_finite(a), _finite(b)), ratio)


def nearest_rank(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of the finite values (q in [0, 100]); NaN without
    any: the smallest value with q % of them at or below it."""
    ordered = np.sort(_finite(values))
    if not len(ordered):
        return math.nan
    rank = math.ceil(q / 100 * len(ordered))
    return float(ordered[min(max(rank, 1), len(ordered)) - 1])
