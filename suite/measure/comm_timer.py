"""Time DDP's gradient all-reduce from inside a communication hook (``timing.comm_hook=true``).

The hook does what DDP's default hook does (divide each bucket by the world size, sum-all-reduce
it, hand the future back) and notes when each bucket's all-reduce was issued and when its future
completed: host clock on CPU (the completion is noted in a ``.then`` callback, which runs on the
communication thread the moment the work finishes), CUDA events on GPU. Any other hook (a
synchronization strategy's) can be timed the same way: from the bucket handed to the hook to its
synchronized gradient, compression and decompression included.
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations at runtime.
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class CommStep:
    """One step's communication, in seconds.

    ``busy_s``: time during which at least one bucket's all-reduce was in flight (the union of
    the buckets' [issue, done] intervals; buckets queue behind each other, so a plain sum of
    their durations would count the queueing twice). ``tail_s``: how long communication was
    still in flight after the last bucket was issued, i.e. after every gradient was ready: the
    part of this step that waited for communication.
    """

    busy_s: float
    tail_s: float
    buckets: int


@dataclass
class _Interval:
    start: Any
    end: Any = None


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end] intervals."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass
class CommTimer:
    """State of the timed all-reduce hook; register it with :meth:`attach`."""

    device: torch.device
    group: dist.ProcessGroup | None = None
    calls: int = 0  # buckets all-reduced since creation (the no_sync check reads this)
    _intervals: list[_Interval] = field(default_factory=list)
    _ref: Any = None

    def attach(
        self,
        ddp: torch.nn.parallel.DistributedDataParallel,
        hook: Callable | None = None,
        state: Any = None,
        issued: Callable[[], int] | None = None,
    ) -> None:
        """Register the timed default all-reduce, or ``hook`` (with its ``state``) timed.

        ``issued`` counts the communication operations ``hook`` has issued; a bucket for which
        it does not grow (a local SGD step: the hook sends nothing) is not timed.
        """
        if hook is None:
            ddp.register_comm_hook(self, timed_allreduce_hook)
        else:
            ddp.register_comm_hook(state, self.timed(hook, issued))

    def timed(self, hook: Callable, issued: Callable[[], int] | None = None) -> Callable:
        """``hook`` with each communicating bucket's [handed over, synchronized] span noted."""

        def timed_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            before, span = issued() if issued else None, _Interval(start=self.clock())
            fut = hook(state, bucket)
            if issued is not None and issued() == before:
                return fut
            self._intervals.append(span)
            self.calls += 1

            def done(fut: torch.futures.Future) -> torch.Tensor:
                span.end = self.clock()
                return fut.value()

            return fut.then(done)

        return timed_hook

    def clock(self) -> Any:
        """A point in time: a recorded CUDA event on GPU, the host clock otherwise."""
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def begin_step(self) -> None:
        self._intervals = []
        self._ref = self.clock()

    def end_step(self) -> CommStep:
        """This step's communication; call after the step's work is synchronized."""
        spans = [(self._seconds(i.start), self._seconds(i.end)) for i in self._intervals]
        self._intervals = []
        if not spans:
            return CommStep(0.0, 0.0, 0)
        last_issue = max(s for s, _ in spans)
        tail = max(0.0, max(e for _, e in spans) - last_issue)
        return CommStep(union_length(spans), tail, len(spans))

    def _seconds(self, mark: Any) -> float:
        if mark is None:
            raise RuntimeError("an all-reduce of this step never completed")
        if self.device.type == "cuda":
            return self._ref.elapsed_time(mark) / 1000.0
        return mark - self._ref


def timed_allreduce_hook(
    timer: "CommTimer", bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default gradient averaging, with the bucket's communication timed."""
    group = timer.group if timer.group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.div_(group.size())  # divide first, as the default hook does (no fp16 overflow)
    span = _Interval(start=timer.clock())
    timer._intervals.append(span)
    timer.calls += 1
    work = dist.all_reduce(tensor, group=group, async_op=True)

    def done(fut: torch.futures.Future) -> torch.Tensor:
        span.end = timer.clock()
        return fut.value()[0]

    return work.get_future().then(done)
