"""Gradient noise scale from data parallelism (McCandlish et al. 2018, Appendix A).

Each worker's local gradient is an estimate at batch ``B_small`` (the per-worker batch); the
all-reduced gradient is one at ``B_big = N * B_small``. From the two squared norms:

    |G|^2   ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(S)   ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

Both are unbiased but noisy; the ratio of noisy estimates is biased, so each is smoothed with an
exponential moving average (bias-corrected like Adam's moments) before ``B_simple = tr(S) / |G|^2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def unbiased_estimates(
    g_small_sq: float, g_big_sq: float, b_small: float, b_big: float
) -> tuple[float, float]:
    """(|G|^2, tr(Sigma)) from one pair of squared gradient norms."""
    if not b_big > b_small > 0:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
    g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


@dataclass
class NoiseScaleEMA:
    """Bias-corrected moving averages of |G|^2 and tr(Sigma), and their ratio B_simple."""

    beta: float = 0.95
    _g2: float = 0.0
    _trace: float = 0.0
    _n: int = 0

    def update(self, g_small_sq: float, g_big_sq: float, b_small: float, b_big: float) -> None:
        g2, trace = unbiased_estimates(g_small_sq, g_big_sq, b_small, b_big)
        if not (math.isfinite(g2) and math.isfinite(trace)):
            return  # a diverging run: keep the last good estimate
        self._g2 = self.beta * self._g2 + (1 - self.beta) * g2
        self._trace = self.beta * self._trace + (1 - self.beta) * trace
        self._n += 1

    @property
    def count(self) -> int:
        return self._n

    def _corrected(self, value: float) -> float:
        return value / (1 - self.beta**self._n)

    @property
    def grad_sq(self) -> float | None:
        return self._corrected(self._g2) if self._n else None

    @property
    def trace(self) -> float | None:
        return self._corrected(self._trace) if self._n else None

    @property
    def b_simple(self) -> float | None:
        """tr(Sigma) / |G|^2, or None before any update or while |G|^2 is not positive."""
        if not self._n or self._g2 <= 0:
            return None
        return self._trace / self._g2
