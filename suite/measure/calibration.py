"""Calibration: time the run's own training steps with gradient sync off, changing nothing.

``exposed communication = step time - step time without sync``: the same step (zero_grad,
forward, backward, optimizer step) on the same batches, but under DDP's ``no_sync()`` so no
gradient is all-reduced (a strategy that synchronizes outside DDP's hooks, like the parameter
server, is told to skip it by ``run_step``). The optimizer really steps, so both timings cover
the same work; the model, optimizer, loss-scaler and RNG states are restored afterwards, so the
training trajectory is exactly the one without calibration.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from suite.engine.precision import Precision
from suite.measure.step_timer import StepTimer


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
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    run_step: Callable[[Any], Any],
    batches: Iterable[tuple[int, Any]],
    warmup: int,
    steps: int,
    device: torch.device,
) -> list[float]:
    """Durations of ``steps`` training steps under ``no_sync()`` (after ``warmup`` untimed).

    ``net`` is the DDP model, or the bare model of a strategy that does not use DDP.
    """
    timer = StepTimer(device, warmup=warmup)
    ddp = isinstance(net, DDP)
    module, quiet = (net.module, net.no_sync()) if ddp else (net, contextlib.nullcontext())
    with preserved_state(module, optimizer, precision), quiet:
        for i, (_, idx) in enumerate(itertools.islice(batches, warmup + steps)):
            timer.start()
            run_step(idx)
            timer.stop(i)
    return timer.durations
