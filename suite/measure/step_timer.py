"""Wall-clock timing of training steps: synchronized, warm-up excluded, summarised robustly."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch


def sync(device: torch.device) -> None:
    """Wait for queued device work so a clock reading means what it says."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class StepTimer:
    """Times each training step on this rank; the first ``warmup`` steps are not kept."""

    device: torch.device
    warmup: int = 5
    durations: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    _seen: int = 0
    _t0: float = 0.0

    def start(self) -> None:
        sync(self.device)
        self._t0 = time.perf_counter()

    def stop(self, step: int) -> float:
        sync(self.device)
        elapsed = time.perf_counter() - self._t0
        self._seen += 1
        if self.last_kept:
            self.durations.append(elapsed)
            self.steps.append(step)
        return elapsed

    @property
    def last_kept(self) -> bool:
        """Whether the step just stopped was timed (not a warm-up step)."""
        return self._seen > self.warmup


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def windowed(xs: list[float], k: int) -> list[float]:
    """Means of consecutive whole windows of ``k`` values (``k`` = 1: the values themselves).

    A median over windows of a strategy's period counts an exchange made every k steps once
    per window, where a median over single steps would leave it out.
    """
    if k <= 1:
        return list(xs)
    return [sum(xs[i : i + k]) / k for i in range(0, len(xs) - k + 1, k)]


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100])."""
    if not xs:
        return None
    ordered = sorted(xs)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def sample_indices(n: int, limit: int) -> list[int]:
    """At most ``limit`` evenly spaced indices into a sequence of length ``n``."""
    if n <= limit:
        return list(range(n))
    return sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
