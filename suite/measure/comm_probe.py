"""Communication time of the training steps, at almost no cost.

By default the time comes from DistributedDataParallel's own reducer timers (C++, the numbers
``DistributedDataParallel._get_ddp_logging_data()`` reports): the reducer notes when the first
bucket's all-reduce was launched, when the last gradient was ready and when the last all-reduce
was waited for, and computes them on every ``timing.comm_every``-th iteration. Reading them
costs a dictionary on those steps only, and no Python runs per bucket; where the strategy files
nothing step by step (DDP's built-in all-reduce), the probe is not called on the other steps at
all. Per sampled step:

* ``comm_s``: from the first bucket's all-reduce to the end of the last, as the reducer sees
  it (its end is noted when backward waits for it, so no earlier than the end of backward);
* ``wait_s``: how long backward waited for communication after the last gradient was ready.

``timing.comm_hook=true`` times every bucket of every step in a Python communication hook
instead (`dpsuite.measure.comm_timer`: the union of in-flight intervals, exact to the bucket).
Either way, an exchange a strategy makes outside DDP's hooks and waits for (the parameter
server, local SGD's model averaging) is timed on every step by the strategy's counter and
added to ``comm_s`` and ``tail_s``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from dpsuite.measure.comm_timer import CommTimer
from dpsuite.measure.probes import Probe
from dpsuite.measure.step_timer import StepTimer, median, percentile
from dpsuite.runtime import distributed
from dpsuite.sync.counter import CommCounter

NS = 1e-9


class CommProbe(Probe):
    """Per-step communication of a run with more than one rank."""

    def __init__(
        self,
        net: torch.nn.Module,
        counter: CommCounter,
        timer: StepTimer,
        device: torch.device,
        every: int,
        hook_timer: CommTimer | None = None,
    ) -> None:
        self.ddp = net if isinstance(net, DDP) and hook_timer is None else None
        self.counter, self.timer, self.device = counter, timer, device
        self.every, self.hook_timer = every, hook_timer
        self.samples: dict[int, tuple[float, float]] = {}  # step -> (comm_s, tail_s) in hooks
        self.rejected = 0
        # Wall clock at the start of each DDP iteration a sample will be of, by iteration (the
        # loop's step: every step with gradient sync is one): with every=1 the next step
        # starts before the previous one's sample is read.
        self._starts_ns: dict[int, int] = {}
        self._before_calibration = (0, 0)  # (ops issued, hooked calls) when calibration began
        # Only the sampled steps need the probe where nothing is filed step by step.
        self.sampling = self.ddp is not None and not counter.files_steps
        if self.ddp is not None:
            self.ddp._set_ddp_runtime_logging_sample_rate(every)

    def next_due(self, step: int) -> int | None:
        """Every step; or, where only DDP's timers are read, each sampled iteration: its start
        is noted, and the previous sample read (the reducer computed it at the forward pass
        after it, and keeps it until the forward pass after this one)."""
        if not self.sampling:
            return step
        return step + (self.every - 1 - step) % self.every

    def on_calibration_start(self) -> None:
        self._before_calibration = self._exchanges()

    def on_calibration_end(self, times: list[float]) -> None:
        if self._exchanges() != self._before_calibration:
            raise RuntimeError("gradients were synchronized during the no_sync calibration")

    def _exchanges(self) -> tuple[int, int]:
        """Collectives issued so far: by the strategy's counter, and through the timed hook."""
        return self.counter.pending_ops, self.hook_timer.calls if self.hook_timer else 0

    def on_step_start(self, step: int) -> None:
        if self.hook_timer is not None:
            self.hook_timer.begin_step()
        elif self.ddp is not None:
            self._read_computed(forwarded=step - 1)
            if (step + 1) % self.every == 0:
                self._starts_ns[step] = time.time_ns()

    def on_step_end(self, step: int) -> None:
        if not self.sampling:
            self.counter.end_step()
        if self.ddp is None and self.hook_timer is None:
            self.samples[step] = (0.0, 0.0)  # no DDP: the strategy's own clock is all there is
        elif self.hook_timer is not None:
            timed = self.hook_timer.end_step()
            self.samples[step] = (timed.busy_s, timed.tail_s)
        elif self.ddp is not None:
            self._read_computed(forwarded=step)

    def _read_computed(self, forwarded: int) -> None:
        """Read DDP's sample of the last noted iteration before ``forwarded``, the last step
        whose forward pass has run: at the forward pass of its k-th iteration (k a multiple
        of `every`) the reducer computes the timings of iteration k-1, and keeps them until
        the next such pass. An older noted iteration not read by then is lost."""
        if not self._starts_ns:
            return
        computed = sorted(s for s in self._starts_ns if s < forwarded)
        for lost in computed[:-1]:
            self._reject(lost)
        if computed:
            self._read_reducer(computed[-1])

    def _reject(self, step: int) -> None:
        self._starts_ns.pop(step, None)
        self.rejected += 1  # not the step we took it for: keep nothing rather than guess
        self.samples[step] = (float("nan"), float("nan"))

    def _read_reducer(self, step: int) -> None:
        data = reducer_timers(self.ddp)  # type: ignore[arg-type]
        start = data.get("backward_compute_time_start", 0)
        described = self._starts_ns.pop(step, None)
        if described is None or not described <= start <= time.time_ns():
            self._reject(step)
            return
        tail = data.get("backward_comm_time_end", 0) - data.get("backward_compute_time_end", 0)
        self.samples[step] = (data.get("backward_comm_time", 0) * NS, max(0, tail) * NS)

    def per_step(self) -> dict[int, tuple[float, float]]:
        """Timed steps with a communication sample: (comm_s, tail_s), max across ranks, with
        what the strategy waited for outside the hooks on that step added."""
        kept = set(self.timer.steps)
        steps = sorted(s for s in self.samples if s in kept)
        waited = [self.counter.steps[s].blocking_s for s in steps]
        comm = [self.samples[s][0] + w for s, w in zip(steps, waited, strict=True)]
        tail = [self.samples[s][1] + w for s, w in zip(steps, waited, strict=True)]
        comm, tail = (
            distributed.max_across_ranks(comm, self.device),
            distributed.max_across_ranks(tail, self.device),
        )
        return {s: (c, t) for s, c, t in zip(steps, comm, tail, strict=True)}

    def step_columns(self) -> dict[int, dict[str, Any]]:
        """comm_s and comm_wait_s of every timed step: NaN on the steps not sampled."""
        sampled = self.per_step()
        nan = (float("nan"), float("nan"))
        return {
            step: dict(zip(("comm_s", "comm_wait_s"), sampled.get(step, nan), strict=True))
            for step in self.timer.steps
        }

    def metrics(self) -> dict[str, Any]:
        """Medians over the sampled steps of the hooks' communication, plus the mean time per
        step of exchanges outside the hooks (one made every k steps counts 1/k per step: a
        sample of every n-th step could miss it altogether)."""
        if self.ddp is not None:
            self._read_computed(forwarded=self.timer.stopped - 1)  # the last step taken
        if self.sampling:
            self.counter.file_quiet_steps(self.timer.stopped)
        kept = set(self.timer.steps)
        steps = sorted(s for s in self.samples if s in kept)
        comm = distributed.max_across_ranks([self.samples[s][0] for s in steps], self.device)
        tail = distributed.max_across_ranks([self.samples[s][1] for s in steps], self.device)
        comm, tail = [c for c in comm if c == c], [t for t in tail if t == t]  # drop rejected
        waited = [self.counter.steps[s].blocking_s for s in self.timer.steps]
        blocking = distributed.max_across_ranks([sum(waited) / max(1, len(waited))], self.device)[0]
        c, t = median(comm), median(tail)
        return {
            "comm_time_s": None if c is None else c + blocking,
            "comm_time_p90_s": percentile([x + blocking for x in comm], 90),
            "comm_wait_s": None if t is None else t + blocking,
            "comm_sampled_steps": len(comm),
            "comm_samples_rejected": self.rejected,
            "comm_timing": "hook" if self.hook_timer else ("ddp_reducer" if self.ddp else "clock"),
        }


def reducer_timers(ddp: DDP) -> dict[str, int]:
    """The integers of DDP's logging data (its timers among them, in ns): what
    ``DDP._get_ddp_logging_data()`` returns without its strings, at a third of the cost."""
    logger = getattr(ddp, "logger", None)
    if logger is None:
        return ddp._get_ddp_logging_data()
    return logger._get_ddp_logging_data().ints_map
