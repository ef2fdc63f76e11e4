"""Per-step tally of what a synchronization strategy communicated: bytes, operations, time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepComm:
    """One step's communication on this rank.

    ``bytes``: size of the tensors handed to communication calls (a collective's tensor once;
    a point-to-point send or receive each). ``ops``: how many such calls. ``overlapped_s``:
    time during which a DDP hook's communication was in flight (the union of the buckets'
    [handed to the hook, synchronized gradient ready] intervals; it can overlap the backward
    pass). ``blocking_s``: time spent in communication the strategy issues outside the hooks and
    waits for (parameter-server exchange, model averaging): exposed by construction.
    """

    bytes: int = 0
    ops: int = 0
    overlapped_s: float = 0.0
    blocking_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.overlapped_s + self.blocking_s


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end] intervals."""
    total, cur_start, cur_end = 0.0, 0.0, None
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
class CommCounter:
    """Collects one step's communication; :meth:`end_step` files it and starts the next step.

    Hooks report from the communication thread (a future's callback), hence the lock.
    """

    steps: list[StepComm] = field(default_factory=list)
    _bytes: int = 0
    _ops: int = 0
    _intervals: list[tuple[float, float]] = field(default_factory=list)
    _blocking: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, nbytes: int, ops: int = 1) -> None:
        with self._lock:
            self._bytes += int(nbytes)
            self._ops += ops

    @property
    def pending_ops(self) -> int:
        """Operations counted so far in the current step."""
        with self._lock:
            return self._ops

    def add_interval(self, start: float, end: float) -> None:
        with self._lock:
            self._intervals.append((start, end))

    def add_blocking(self, seconds: float) -> None:
        with self._lock:
            self._blocking += seconds

    def end_step(self) -> StepComm:
        with self._lock:
            step = StepComm(self._bytes, self._ops, union_length(self._intervals), self._blocking)
            self._bytes, self._ops, self._intervals, self._blocking = 0, 0, [], 0.0
        self.steps.append(step)
        return step

    def discard_step(self) -> None:
        """Forget what was counted since the last step (communication outside training)."""
        with self._lock:
            self._bytes, self._ops, self._intervals, self._blocking = 0, 0, [], 0.0

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.steps)

    @property
    def total_ops(self) -> int:
        return sum(s.ops for s in self.steps)


def now() -> float:
    return time.perf_counter()
