"""Profiler timelines: ``torch.profiler`` over a few steady-state steps, on every rank.

With ``profile.steps=N`` each rank records steps ``start .. start+N-1`` (``start`` defaults to
the first step after the timing warm-up) and writes one Chrome/Perfetto trace into
``<run dir>/profile/`` as ``tensorboard_trace_handler`` names it
(``rank<r>.<time>.pt.trace.json``): open it in https://ui.perfetto.dev, ``chrome://tracing``
or ``tensorboard --logdir <run dir>/profile``. The trace shows where the all-reduce sits in
backward (``record_param_comms``, ``gloo:all_reduce`` / ``nccl:all_reduce``, the autograd
engine's ``autograd::engine::evaluate_function`` events) and how long each rank waited.

The profiler starts one step early (its warm-up step, not recorded: the profiler's own start
costs more than a steady step) and stops after the last recorded step, both outside the step
timer's bracket; the recorded steps themselves run slower under it, which is why a profiled run
has its own run id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import profiler

from dpsuite.measure.probes import Probe
from dpsuite.results.store import PROFILE_DIR as TRACE_DIR

# run.json's profiler metrics of a run that was not profiled.
NOT_PROFILED: dict[str, Any] = {"profiled_steps": None, "profile_dir": None}


class ProfilerProbe(Probe):
    """Records ``steps`` steps from ``first`` on with ``torch.profiler``; one trace per rank."""

    def __init__(
        self, run_dir: Path, rank: int, first: int, steps: int, device: torch.device
    ) -> None:
        self.out = Path(run_dir) / TRACE_DIR
        self.rank, self.first, self.steps, self.device = rank, first, steps, device
        self.warmup = 1 if first > 0 else 0
        self.recorded: list[int] = []
        self._profile: profiler.profile | None = None

    @property
    def last(self) -> int:
        return self.first + self.steps - 1

    def on_step_start(self, step: int) -> None:
        if step == self.first - self.warmup and self._profile is None:
            self._profile = self._profiler()
            self._profile.start()

    def on_step_end(self, step: int) -> None:
        if self._profile is None:
            return
        if step >= self.first:
            self.recorded.append(step)
        self._profile.step()
        if step >= self.last:
            self._profile.stop()  # writes this rank's trace (on_trace_ready)
            self._profile = None

    def _profiler(self) -> profiler.profile:
        activities = [profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(profiler.ProfilerActivity.CUDA)
        return profiler.profile(
            activities=activities,
            schedule=profiler.schedule(wait=0, warmup=self.warmup, active=self.steps, repeat=1),
            on_trace_ready=profiler.tensorboard_trace_handler(
                str(self.out), worker_name=f"rank{self.rank}"
            ),
        )

    def metrics(self) -> dict[str, Any]:
        if self._profile is not None:  # the run ended inside the window: keep what it has
            self._profile.stop()
            self._profile = None
        return {
            "profiled_steps": (
                f"{self.recorded[0]}-{self.recorded[-1]}" if self.recorded else None
            ),
            "profile_dir": TRACE_DIR if self.recorded else None,
        }
