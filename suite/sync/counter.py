"""Per-step tally of what a synchronization strategy communicated: bytes, operations, waiting."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepComm:
    """One step's communication on this rank.

    ``bytes``: size of the tensors handed to communication calls (a collective's tensor once;
    a point-to-point send or receive each). ``ops``: how many such calls. ``blocking_s``: time
    spent in communication the strategy issues outside DDP's hooks and waits for (parameter
    server exchange, model averaging): exposed by construction. (Hooks are timed by
    `suite.measure.comm_timer`.)
    """

    bytes: int = 0
    ops: int = 0
    blocking_s: float = 0.0


@dataclass
class CommCounter:
    """Collects one step's communication; :meth:`end_step` files it and starts the next step.

    Hooks may report from the communication thread, hence the lock.
    """

    steps: list[StepComm] = field(default_factory=list)
    _bytes: int = 0
    _ops: int = 0
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

    def add_blocking(self, seconds: float) -> None:
        with self._lock:
            self._blocking += seconds

    def end_step(self) -> StepComm:
        with self._lock:
            step = StepComm(self._bytes, self._ops, self._blocking)
            self._bytes, self._ops, self._blocking = 0, 0, 0.0
        self.steps.append(step)
        return step

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.steps)

    @property
    def total_ops(self) -> int:
        return sum(s.ops for s in self.steps)
