"""A report's figures drawn in forked processes beside the report's own.

Drawing is most of a large report's time (each figure is rendered twice, PNG and SVG, each
with its tight bounding box), and every figure is independent of the others. Where the
platform forks, up to ``MAX_PROCESSES`` processes draw (the report's own included, one per
available core): the plots' indices wait in a pipe, each process takes the next one as it is
free (a read of 4 bytes from a pipe is atomic), and each child names, through a pipe of its
own, each figure as it is saved. The report's process may do other work first (``meanwhile``):
its children start drawing at once.

A child ends itself once the report's process is gone (checked before each figure, and its next
report of a figure fails on the closed pipe), so it outlives a killed report by one figure's
drawing at most. The report stops its children when it stops first (an error, Ctrl-C, SIGTERM):
SIGTERM, on which a child unwinds (a file being written removes its temporary), then SIGKILL
after ``STOP_GRACE_S``. Whatever a child does not deliver (an error in a plot, a crash, a child
stuck past ``DEADLINE_FACTOR`` times the report's own drawing) the report draws itself: an error
in a plot is raised where it would be without children, and a figure is the same bytes whichever
process drew it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from dpsuite.runtime.pipe import Pipe

P = TypeVar("P")
Save = Callable[[P], "str | None"]  # draw and save one plot: its file name, or None (no figure)

MAX_PROCESSES = 4
PLOTS_PER_PROCESS = 3  # fewer per process than this: a fork costs more than it saves
DEADLINE_FACTOR = 4.0  # a child may take this many times the report's own share, ...
MIN_DEADLINE_S = 60.0  # ... and at least this long, before its share is drawn here
INDEX = struct.Struct("<i")  # a plot's index in the pipe of those waiting
# All indices are written before any process reads: 1,024 of them (4 KiB) fit any pipe's buffer.
MAX_PLOTS = 1024
STOP_GRACE_S = 2.0  # for a child told to stop to unwind before it is killed


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def process_count(plots: int) -> int:
    """Processes to draw ``plots`` figures with, the report's own included."""
    if not hasattr(os, "fork") or plots > MAX_PLOTS:
        return 1
    return max(1, min(MAX_PROCESSES, available_cores(), plots // PLOTS_PER_PROCESS))


def save_all(
    plots: list[P], save: Save, meanwhile: Callable[[], None] | None = None
) -> list[str | None]:
    """``save(plot)`` for every plot, in forked processes where that helps, and ``meanwhile()``
    in this one before it joins them: the saved files' names (None where a plot found nothing
    to draw), in the plots' order."""
    processes = process_count(len(plots))
    if processes == 1:
        if meanwhile is not None:
            meanwhile()
        return [save(plot) for plot in plots]
    waiting = Waiting(len(plots))
    children: list[Child] = []
    try:
        for _ in range(processes - 1):
            children.append(Child.start(plots, save, waiting, [c.read_fd for c in children]))
        waiting.close_write_end()  # so that the last read of every process finds the end
        if meanwhile is not None:
            meanwhile()
        started = time.monotonic()
        saved = {index: save(plots[index]) for index in waiting.indices()}
        deadline = time.monotonic() + max(
            MIN_DEADLINE_S, DEADLINE_FACTOR * (time.monotonic() - started)
        )
        for child in children:
            saved.update(child.delivered(deadline))
            child.stop()
        for index in range(len(plots)):  # what a child took and did not deliver
            if index not in saved:
                saved[index] = save(plots[index])
    finally:
        waiting.close()
        for child in children:
            child.stop()
    return [saved[i] for i in range(len(plots))]


class Waiting(Pipe):
    """The indices of the plots no process has taken yet, in a pipe."""

    def __init__(self, count: int) -> None:
        super().__init__()
        os.write(self.write_fd, b"".join(INDEX.pack(i) for i in range(count)))

    def indices(self) -> Iterator[int]:
        """The next index, as long as one is left (each goes to one process only)."""
        while chunk := os.read(self.read_fd, INDEX.size):
            yield INDEX.unpack(chunk)[0]


@dataclass
class Child:
    """A forked process saving plots it takes from ``Waiting``."""

    pid: int
    read_fd: int

    @classmethod
    def start(cls, plots: list[P], save: Save, waiting: Waiting, siblings: list[int]) -> Child:
        """Fork the child; ``siblings``: the read ends of the children before it (closed in
        this one, so that a sibling's report fails once the report's process is gone)."""
        parent = os.getpid()
        read_fd, write_fd = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns of forking a process with threads: here numpy's OpenBLAS and
            # Arrow's pools, which both start afresh in a child, and a child that hangs anyway
            # is killed at the deadline and its plots drawn by the report.
            warnings.filterwarnings(
                "ignore", "This process .* is multi-threaded", DeprecationWarning
            )
            pid = os.fork()
        if pid == 0:  # the child: never returns
            for fd in (read_fd, *siblings):
                os.close(fd)
            waiting.close_write_end()
            _child(plots, save, waiting, parent, write_fd)
        os.close(write_fd)
        return cls(pid, read_fd)

    def delivered(self, deadline: float) -> dict[int, str | None]:
        """The figures the child saved: read up to its end (EOF), and after ``deadline`` only
        what it has already written."""
        data = b""
        while select.select([self.read_fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                break
            data += chunk
        # Only whole lines count: a child killed mid-write delivered the lines before.
        return dict(json.loads(line) for line in data.split(b"\n")[:-1])

    def stop(self) -> None:
        """End the child if it still runs (SIGTERM, so that a file it is writing is not left
        half-written; SIGKILL after ``STOP_GRACE_S``), reap it, close the pipe."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            if not self._reaped(STOP_GRACE_S):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.pid = 0
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    def _reaped(self, within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True


def _child(plots: list[P], save: Save, waiting: Waiting, parent: int, write_fd: int) -> None:
    """Save the plots taken from ``waiting`` and name each saved figure on ``write_fd``; exit
    (0, or 1 on any error: the report draws what was not delivered, and raises it there)."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, _stopped)  # the report's handler is not this one's
        for index in waiting.indices():
            if os.getppid() != parent:  # the report is gone: nothing here is wanted any more
                break
            line = json.dumps([index, save(plots[index])]) + "\n"
            os.write(write_fd, line.encode())
        else:
            code = 0
    except BaseException:  # noqa: BLE001 -- the report redraws what was not delivered
        pass
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the report's buffered output


def _stopped(signum: int, frame: object) -> None:
    """SIGTERM in a child: unwind (a file being written removes its temporary), then exit."""
    raise SystemExit(1)
