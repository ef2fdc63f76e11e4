"""Wall-clock timing of training steps: synchronized, warm-up excluded, summarised robustly."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from dpsuite.measure.probes import Probe


@dataclass
class StepTimer:
    """Times each training step on this rank; the first ``warmup`` steps are not kept.

    On CPU a step is the wall clock between ``start`` and ``stop``. On CUDA it is the time
    between two events recorded on the device's stream, so that timing a step never waits for
    the device: the events are read once they have completed (checked without blocking at
    each ``stop``) and all at once when ``durations`` is read. While the host runs ahead of the
    device the time between the events is the device's step time, which is the throughput.
    """

    device: torch.device
    warmup: int = 5
    steps: list[int] = field(default_factory=list)
    _durations: list[float] = field(default_factory=list)
    _open: deque[tuple[Any, Any]] = field(default_factory=deque)  # CUDA events not yet read
    _seen: int = 0
    started_at: float = 0.0  # host clock at the last start (the wait for data counts from it)
    _start_event: Any = None
    # Decided once: start and stop run on every step, and on CPU are a clock reading each.
    on_device: bool = field(init=False)

    def __post_init__(self) -> None:
        self.on_device = self.device.type == "cuda"

    def start(self, step: int | None = None) -> None:
        if self.on_device:
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record()
        self.started_at = time.perf_counter()  # on CPU the step's start: nothing is queued

    def stop(self, step: int) -> float | None:
        """This step's seconds on CPU; on CUDA None (known once its events have completed)."""
        self._seen += 1
        if self.on_device:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            if self.last_kept:
                self.steps.append(step)
                self._open.append((self._start_event, end))
            self._read_completed()
            return None
        elapsed = time.perf_counter() - self.started_at
        if self._seen > self.warmup:
            self._durations.append(elapsed)
            self.steps.append(step)
        return elapsed

    def _read_completed(self, wait: bool = False) -> None:
        while self._open and (wait or self._open[0][1].query()):
            begin, end = self._open.popleft()
            end.synchronize()  # at once when query() said so
            self._durations.append(begin.elapsed_time(end) / 1e3)

    @property
    def durations(self) -> list[float]:
        """Seconds of each kept step, in the order of ``steps`` (on CUDA: waits for the last)."""
        self._read_completed(wait=True)
        return self._durations

    @durations.setter
    def durations(self, values: list[float]) -> None:
        self._durations = list(values)

    @property
    def stopped(self) -> int:
        """Steps stopped so far, warm-up included."""
        return self._seen

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


# The interval of the median step time: distribution-free, at least this confidence.
CONFIDENCE = 0.95
# A timed step (window) slower than this many median steps is an outlier: a hiccup of the
# machine (a page fault, another process), not the workload's step.
OUTLIER_FACTOR = 3.0


def median_interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A confidence interval of the median from order statistics, assuming nothing of the
    distribution: the k-th smallest and k-th largest values, k the largest for which
    P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2. Under 6 values no k reaches 95 %: the
    smallest and largest value then."""
    ordered = sorted(xs)
    n = len(ordered)
    tail = (1 - confidence) / 2
    k, below = 0, 0.0  # below: P(B < k + 1), summed one term at a time
    while k < n // 2:
        below += math.exp(binomial_log_pmf(n, k))
        if below > tail:
            break
        k += 1
    k = max(k, 1)
    return ordered[k - 1], ordered[n - k]


def binomial_log_pmf(n: int, k: int) -> float:
    """log P(B = k) for B ~ Binomial(n, 1/2), in floats (n may be tens of thousands)."""
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)


def outliers(xs: Sequence[float], typical: float, factor: float = OUTLIER_FACTOR) -> int:
    """How many of ``xs`` are longer than ``factor`` x ``typical``."""
    return sum(x > factor * typical for x in xs)


def steady_state(step_times: Sequence[float], global_batch: int) -> dict[str, Any]:
    """Step time and throughput of the timed steps, from one statistic: the median step.

    A mean (or a sum) would let one slow step move the throughput tenfold; the median does
    not, and ``samples_per_s`` is ``global_batch / step_time_s`` so that the two always agree.
    """
    if not step_times:
        keys = ("samples_per_s", "step_time_s", "step_time_ci_low_s", "step_time_ci_high_s")
        return {**dict.fromkeys(keys), "outlier_steps": 0}
    step = statistics.median(step_times)
    low, high = median_interval(step_times)
    return {
        "samples_per_s": global_batch / step if step > 0 else None,
        "step_time_s": step,
        "step_time_ci_low_s": low,
        "step_time_ci_high_s": high,
        "outlier_steps": outliers(step_times, step),
    }


def sample_indices(n: int, limit: int) -> list[int]:
    """At most ``limit`` evenly spaced indices into a sequence of length ``n``."""
    if n <= limit:
        return list(range(n))
    return sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})


class StepTimeProbe(Probe):
    """Times every step (warm-up excluded): step time and throughput.

    A step's time is the slowest rank's; throughput is the global batch over the median step
    (``steady_state``), never rank 0 x N. Medians are taken over windows of ``period`` steps,
    so that an exchange made every ``period`` steps (local SGD) counts at its real weight.
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
        # The timer's own methods are the hooks: a Python call less at each end of every step.
        self.on_step_start = self.timer.start  # type: ignore[method-assign]
        self.on_step_end = self.timer.stop  # type: ignore[method-assign]

    def on_step_start(self, step: int) -> None:
        self.timer.start()

    def on_step_end(self, step: int) -> None:
        self.timer.stop(step)

    def metrics(self) -> dict[str, Any]:
        from dpsuite.runtime import distributed

        durations = self.timer.durations
        self.step_max = distributed.max_across_ranks(durations, self.device)
        steady = steady_state(windowed(self.step_max, self.period), self.global_batch)
        samples_per_s = steady["samples_per_s"]
        return {
            **steady,
            "samples_per_s_per_worker": samples_per_s / self.workers if samples_per_s else None,
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
