"""Medians of repeated measurements with percentile-bootstrap confidence intervals, and
nearest-rank percentiles (a value that was measured, as `dpsuite.measure.step_timer` takes them).

A scaling point is measured `repeat` times; its throughput is the median of the repeats and its
interval the bootstrap interval of that median. A ratio between two machines resamples each
machine's repeats independently. The generator is seeded: the same results give the same
intervals in every report.

The percentile bootstrap is computed here, draw for draw and digit for digit what
``scipy.stats.bootstrap(..., method="percentile", paired=False)`` gives with the same generator
(scipy >= 1.17; tests/test_report_stats.py compares the two): importing scipy.stats for it cost
every report and comparison about half a second, more than all its intervals.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


def _interval(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    seed: int = SEED,
    resamples: int = RESAMPLES,
) -> tuple[float, float]:
    """The percentile-bootstrap interval of ``statistic`` (vectorised: it takes ``axis``),
    each sample resampled on its own; (nan, nan) when a sample has fewer than two values."""
    if any(len(s) < 2 for s in samples):  # one measurement has no spread to resample
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    # each sample's resamples in turn, all at once: the draws scipy's bootstrap makes
    resampled = [s[rng.integers(0, len(s), (resamples, len(s)))] for s in samples]
    distribution = np.asarray(statistic(*resampled, axis=-1), dtype=float)
    alpha = (1 - CONFIDENCE) / 2
    low, high = linear_quantiles(distribution, np.array([alpha, 1 - alpha]))
    if math.isnan(low) or math.isnan(high):
        warnings.warn(
            "The bootstrap confidence interval cannot be calculated: the distribution is "
            "degenerate.",
            RuntimeWarning,
            stacklevel=3,
        )
    return float(low), float(high)


def linear_quantiles(values: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The ``p`` quantiles of ``values`` by linear interpolation (NaN if any value is),
    computed as ``scipy.stats.quantile`` computes them, so that the last digit agrees."""
    ordered = np.sort(values)
    if np.isnan(ordered).any():
        return np.full(len(p), np.nan)
    n = float(len(ordered))
    position = p * n + (1 - p)  # Hyndman and Fan's type 7, one-based
    upper = position // 1
    lower = upper - 1
    weight = position % 1
    weight[lower < 0] = 0
    lower, upper = np.clip(lower, 0.0, n - 1), np.clip(upper, 0.0, n - 1)
    return (1 - weight) * ordered[lower.astype(np.int64)] + weight * ordered[upper.astype(np.int64)]


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
