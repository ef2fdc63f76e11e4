"""Wall-clock timing of training steps: synchronized, warm-up excluded, summarised robustly."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from dpsuite.measure.probes import Probe
from dpsuite.runtime.host import wait_for_device


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
        wait_for_device(self.device)
        self._t0 = time.perf_counter()

    def stop(self, step: int) -> float:
        wait_for_device(self.device)
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
    rank = math.ceil(q / 100 * len(ordered))  # the smallest value with q % of them at or below
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def sample_indices(n: int, limit: int) -> list[int]:
    """At most ``limit`` evenly spaced indices into a sequence of length ``n``."""
    if n <= limit:
        return list(range(n))
    return sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})


class StepTimeProbe(Probe):
    """Times every step (warm-up excluded): step time and throughput.

    Throughput is global samples over the slowest rank's summed step time, never rank 0 x N.
    Medians are taken over windows of ``period`` steps, so that an exchange made every
    ``period`` steps (local SGD) counts at its real weight.
    """

    def __init__(
        self, device: torch.device, warmup: int, global_batch: int, workers: int, period: int
    ) -> None:
        self.timer = StepTimer(device, warmup=warmup)
        self.device, self.global_batch, self.workers, self.period = (
            device,
            global_batch,
            workers,
            period,
        )
        self.step_max: list[float] = []  # per timed step, the max across ranks (after metrics)

    def on_step_start(self, step: int) -> None:
        self.timer.start()

    def on_step_end(self, step: int) -> None:
        self.timer.stop(step)

    def metrics(self) -> dict[str, Any]:
        from dpsuite.runtime import distributed

        durations = self.timer.durations
        self.step_max = distributed.max_across_ranks(durations, self.device)
        slowest_total = distributed.max_across_ranks([sum(durations)], self.device)[0]
        samples_per_s = (
            len(durations) * self.global_batch / slowest_total if slowest_total > 0 else None
        )
        return {
            "samples_per_s": samples_per_s,
            "samples_per_s_per_worker": samples_per_s / self.workers if samples_per_s else None,
            "step_time_s": self.step_time_s,
            "step_time_p90_s": percentile(self.step_max, 90),
            "step_time_min_s": min(self.step_max) if self.step_max else None,
            "timed_steps": len(durations),
        }

    @property
    def step_time_s(self) -> float | None:
        """The median step (over windows of ``period`` steps), max across ranks."""
        return median(windowed(self.step_max, self.period))

    def step_columns(self) -> dict[int, dict[str, Any]]:
        """Every timed step's time, max across ranks (read after ``metrics`` gathered it)."""
        return {
            step: {"step_time_s": t}
            for step, t in zip(self.timer.steps, self.step_max, strict=True)
        }
