"""Per-step tally of what a synchronization strategy communicated: bytes, operations, waiting.

Bytes are what this rank sends on the wire (the suite's one convention for every strategy):
a point-to-point send counts its tensor, a receive nothing, and an all-reduce of a buffer of S
bytes among n ranks 2(n-1)/n x S, what each rank sends in a ring all-reduce (reduce-scatter,
then all-gather), whatever algorithm the backend picks, as nccl-tests' bus bandwidth counts it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


def ring_wire_bytes(buffer_bytes: float, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of a buffer: 2(n-1)/n of it."""
    return 2 * (world_size - 1) / world_size * buffer_bytes if world_size > 1 else 0.0


@dataclass(frozen=True)
class StepComm:
    """One step's communication on this rank.

    ``bytes``: sent on the wire (see the module docstring). ``ops``: communication calls.
    ``blocking_s``: time spent in communication the strategy issues outside DDP's hooks and
    waits for (parameter server exchange, model averaging): exposed by construction.
    """

    bytes: float = 0.0
    ops: int = 0
    blocking_s: float = 0.0


# The tally of a step that communicated nothing through the counter (shared: it is frozen).
NO_COMM = StepComm()


@dataclass
class CommCounter:
    """Collects one step's communication; :meth:`end_step` files it and starts the next step.

    Hooks may report from the communication thread, hence the lock. A counter that does not
    ``files_steps`` (its strategy's traffic is the same every step, counted elsewhere) refuses
    anything counted, and its steps are filed all at once (:meth:`file_quiet_steps`).
    """

    files_steps: bool = True
    steps: list[StepComm] = field(default_factory=list)
    _bytes: float = 0.0
    _ops: int = 0
    _blocking: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, nbytes: float, ops: int = 1) -> None:
        self._filing()
        with self._lock:
            self._bytes += nbytes
            self._ops += ops

    @property
    def pending_ops(self) -> int:
        """Operations counted so far in the current step."""
        with self._lock:
            return self._ops

    def add_blocking(self, seconds: float) -> None:
        self._filing()
        with self._lock:
            self._blocking += seconds

    def end_step(self) -> StepComm:
        with self._lock:
            if self._ops or self._bytes or self._blocking:
                step = StepComm(self._bytes, self._ops, self._blocking)
                self._bytes, self._ops, self._blocking = 0.0, 0, 0.0
            else:
                step = NO_COMM  # a step of DDP's built-in all-reduce: no object per step
        self.steps.append(step)
        return step

    def file_quiet_steps(self, steps: int) -> None:
        """File steps in which nothing was counted until ``steps`` are filed."""
        self.steps.extend([NO_COMM] * (steps - len(self.steps)))

    def _filing(self) -> None:
        if not self.files_steps:
            raise RuntimeError(
                "communication counted by a strategy that declares it files none "
                "(files_traffic = False): it would be left out of the run's traffic"
            )

    @property
    def total_bytes(self) -> float:
        return sum(s.bytes for s in self.steps)

    @property
    def total_ops(self) -> int:
        return sum(s.ops for s in self.steps)
