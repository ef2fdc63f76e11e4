"""A command whose stdout reader goes away (`dpsuite schema | head`) ends quietly, as a shell
tool does: exit 141, no traceback, whichever thread was writing (the progress relay's too)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

EXIT_BROKEN_PIPE = 128 + 13  # as a shell reports a command that SIGPIPE ended


class ClosedPipeTolerant:
    """Stands for sys.stdout: once a write finds the pipe closed, what follows goes nowhere
    (the descriptor now points at /dev/null, for the workers and for Python's exit flush)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.pipe_closed = False

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self.to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.to_devnull()

    def to_devnull(self) -> None:
        self.pipe_closed = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def tolerated() -> Iterator[ClosedPipeTolerant]:
    """sys.stdout as a ClosedPipeTolerant while the block runs (restored after it)."""
    previous = sys.stdout
    guard = ClosedPipeTolerant(previous)
    sys.stdout = guard
    try:
        yield guard
    except BrokenPipeError:  # a write that went round sys.stdout
        guard.to_devnull()
    finally:
        sys.stdout = previous
