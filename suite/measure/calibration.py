"""Calibration: time the run's own training steps with gradient sync off, changing nothing.

``exposed communication = step time - step time without sync``, the slowest rank's: the same
step (zero_grad,
forward, backward, optimizer step) on the same batches, but under DDP's ``no_sync()`` so no
gradient is all-reduced (a strategy that synchronizes outside DDP's hooks, like the parameter
server, is switched off by the replicas). The optimizer really steps, so both timings cover
the same work; the model, optimizer, loss-scaler and RNG states are restored afterwards, so the
training trajectory is exactly the one without calibration.

The step splits into the typical rank's compute (``rank_compute_time_s``: each rank's median
step without sync, averaged over ranks), the wait for the slowest rank (``straggler_wait_s``:
the slowest rank's compute per step minus the typical rank's; a synchronous step cannot finish
before its slowest rank's gradients) and the exposed all-reduce (``exposed_comm_s``: what the
step takes beyond the slowest rank's compute).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from dpsuite.measure.data_wait import DataWaitProbe
from dpsuite.measure.probes import Probe
from dpsuite.measure.step_timer import StepTimeProbe, StepTimer, median, windowed
from dpsuite.optim.precision import Precision


@contextlib.contextmanager
def preserved_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, precision: Precision
) -> Iterator[None]:
    """Whatever happens inside, leave parameters, buffers, optimizer, scaler and RNG as found."""
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt_state = copy.deepcopy(optimizer.state_dict())
    amp_state = copy.deepcopy(precision.state_dict())
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            model.load_state_dict(params)  # copies in place: DDP keeps its parameter views
        optimizer.load_state_dict(opt_state)
        optimizer.zero_grad(set_to_none=True)
        precision.load_state_dict(amp_state)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def time_without_sync(
    model: nn.Module,
    quiet: contextlib.AbstractContextManager,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    run_step: Callable[[Any], Any],
    batches: Iterable[tuple[int, Any]],
    warmup: int,
    steps: int,
    device: torch.device,
) -> list[float]:
    """Durations of ``steps`` training steps inside ``quiet`` (after ``warmup`` untimed).

    ``quiet`` turns communication off (DDP's ``no_sync()``, or the replicas' own switch for a
    strategy that exchanges outside DDP); ``model`` is the bare model whose state is restored.
    """
    timer = StepTimer(device, warmup=warmup)
    with preserved_state(model, optimizer, precision), quiet:
        for i, (_, idx) in enumerate(itertools.islice(batches, warmup + steps)):
            timer.start()
            run_step(idx)
            timer.stop(i)
    return timer.durations


def mean_across_ranks(value: float | None, device: torch.device) -> float | None:
    """The mean over ranks of one number per rank (None if any rank has none)."""
    import torch.distributed as dist

    from dpsuite.runtime import distributed

    if not distributed.active():
        return value
    t = torch.tensor([value if value is not None else float("nan")], dtype=torch.float64)
    t = t.to(device)
    dist.all_reduce(t)
    mean = float(t.item()) / dist.get_world_size()
    return None if mean != mean else mean


def exposed_metrics(
    step_time_s: float | None,
    no_sync_times: list[float],
    period: int,
    device: torch.device,
    data_wait_s: float = 0.0,
) -> dict[str, Any]:
    """compute_time_s (the median step without sync, max across ranks), exposed_comm_s (what
    sync adds to the median step beyond its wait for data), comm_fraction (its share of the
    step), and the split of compute_time_s into the typical rank's compute and the wait for the
    slowest rank."""
    from dpsuite.runtime import distributed

    compute = median(windowed(distributed.max_across_ranks(no_sync_times, device), period))
    typical = mean_across_ranks(median(windowed(no_sync_times, period)), device)
    wait = None
    if compute is not None and typical is not None:
        wait = max(0.0, compute - typical)
        typical = compute - wait  # the three parts add up to the step
    exposed = None
    if step_time_s is not None and compute is not None:
        # Noise can make the difference slightly negative; no sync cannot cost time.
        exposed = max(0.0, step_time_s - data_wait_s - compute)
    return {
        "compute_time_s": compute,
        "exposed_comm_s": exposed,
        "comm_fraction": exposed / step_time_s if exposed is not None and step_time_s else None,
        "rank_compute_time_s": typical,
        "straggler_wait_s": wait,
        "calibration_steps": len(no_sync_times),
    }


class ExposedCommProbe(Probe):
    """The step split into compute and exposed communication: the run's median step against its
    calibration's. In a run of one process nothing is communicated: the step is all compute,
    and every step's communication is 0."""

    def __init__(
        self, step_probe: StepTimeProbe, communicates: bool, data_wait: DataWaitProbe
    ) -> None:
        self.step_probe, self.communicates, self.data_wait = step_probe, communicates, data_wait
        self.no_sync_times: list[float] = []

    def on_calibration_end(self, times: list[float]) -> None:
        self.no_sync_times = times

    def metrics(self) -> dict[str, Any]:
        step_s = self.step_probe.step_time_s
        wait = self.data_wait.data_wait_s or 0.0
        if self.communicates:
            probe = self.step_probe
            return exposed_metrics(step_s, self.no_sync_times, probe.period, probe.device, wait)
        compute = max(0.0, step_s - wait) if step_s is not None else None
        return {
            "compute_time_s": compute,
            "comm_time_s": 0.0,
            "exposed_comm_s": 0.0,
            "rank_compute_time_s": compute,
            "straggler_wait_s": 0.0,
            "comm_fraction": 0.0 if step_s else None,
            "calibration_steps": 0,
        }

    def step_columns(self) -> dict[int, dict[str, Any]]:
        if self.communicates:
            return {}  # the communication probe's
        return {step: {"comm_s": 0.0, "comm_wait_s": 0.0} for step in self.step_probe.timer.steps}
