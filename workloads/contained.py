"""Calling code of other packages (a plugin's import, a workload's ``load_data``) so that
nothing it does ends the process: it runs in a thread of its own.

Whatever escapes it (an exception, ``sys.exit``, a ``KeyboardInterrupt`` it raises itself) or a
call that does not return within its time limit comes back as ``Escaped``, with a phrase that
says which. A thread that overruns its limit is abandoned (a daemon thread: it never holds the
process open); the caller goes on without it. Ctrl-C still reaches the caller, which waits in
the main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Escaped(Exception):
    """The contained call did not return: ``str()`` says how it ended, ``cause`` is what it
    raised (None when it ran out of time)."""

    def __init__(self, how: str, cause: BaseException | None = None) -> None:
        super().__init__(how)
        self.cause = cause


def call_contained(fn: Callable[[], T], limit_s: float | None = None, name: str = "") -> T:
    """``fn()``'s result, run in a daemon thread and waited for at most ``limit_s`` seconds
    (None: as long as it takes); Escaped when it raised, exited or ran out of time."""
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: all of them, by design
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name=f"dpsuite-contained-{name}", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive() or not outcome:
        raise Escaped(f"did not return within {limit_s:g} s")
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[return-value]
    assert isinstance(value, BaseException)
    raise Escaped(how_it_ended(value), value)


def how_it_ended(exc: BaseException) -> str:
    """``ValueError: bad shape``, ``SystemExit: sys.exit(0)``, ``KeyboardInterrupt``: one line."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: sys.exit({exc.code!r})"
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
