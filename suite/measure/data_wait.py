"""Time waiting on data: per step and rank, how long the step was blocked on its next batch.

What DeepLearningExamples logs as ``data_time`` and torchtitan as ``time_data_loading``: from the
step's start until its batch is on hand (taken from the DataLoader and its copy to the device
issued). It is part of the step's time, so throughput is what the job gets with its input
pipeline. For in-memory tensors the wait is taking an index batch: microseconds.
"""

from __future__ import annotations

import time
from typing import Any

from dpsuite.measure.probes import Probe
from dpsuite.measure.step_timer import StepTimeProbe, median


class DataWaitProbe(Probe):
    """Each timed step's wait for its batch, from the step timer's start (one clock reading
    per step less); steps.csv and run.json get the slowest rank's."""

    def __init__(self, step_probe: StepTimeProbe) -> None:
        self.step_probe = step_probe
        self.timer = step_probe.timer
        self.waits: dict[int, float] = {}
        self.wait_max: list[float] = []  # per timed step, the max across ranks (after metrics)

    def on_batch_ready(self, step: int) -> None:
        self.waits[step] = time.perf_counter() - self.timer.started_at

    def metrics(self) -> dict[str, Any]:
        from dpsuite.runtime import distributed

        timed = self.step_probe.timer.steps
        mine = [self.waits.get(step, 0.0) for step in timed]
        self.wait_max = distributed.max_across_ranks(mine, self.step_probe.device)
        first = self.waits.get(min(self.waits)) if self.waits else None
        [first_max] = distributed.max_across_ranks(
            [first if first is not None else 0.0], self.step_probe.device
        )
        total = sum(self.step_probe.step_max)
        return {
            "data_wait_s": self.data_wait_s,
            "data_wait_share": min(1.0, sum(self.wait_max) / total) if total > 0 else None,
            "first_batch_s": first_max if first is not None else None,
        }

    @property
    def data_wait_s(self) -> float | None:
        """The median step's wait for data, max across ranks (read after ``metrics``)."""
        return median(self.wait_max)

    def step_columns(self) -> dict[int, dict[str, Any]]:
        timed = self.step_probe.timer.steps
        return {step: {"data_wait_s": w} for step, w in zip(timed, self.wait_max, strict=True)}
