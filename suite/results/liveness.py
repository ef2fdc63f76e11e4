"""Whether a run that its run.json says is `running` still runs: its process, its heartbeat.

The process that writes a run's record (rank 0) rewrites ``heartbeat_at`` at least every
HEARTBEAT_S while it runs (``keep_beating``), besides each evaluation; the launcher does
the same while it prepares the run's data, before its workers start. A record is judged
stale, and reads as `failed`, when its process is gone (on this host, where its pid can be
checked) or when its heartbeat is older than STALE_AFTER_S, wherever it ran: a pid reused
by an unrelated process, or a run on a node that died, is not taken for a live run.

STALE_AFTER_S is 15 times HEARTBEAT_S: a loaded machine, a slow shared file system or a
few minutes of clock difference between nodes do not make a live run look dead, while a
dead one is recognised within a quarter of an hour. A run stopped longer than that
(SIGSTOP, Ctrl-Z) reads as failed, and a rerun may take its place.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, Protocol

HEARTBEAT_S = 60.0
STALE_AFTER_S = 15 * HEARTBEAT_S


class Beating(Protocol):
    def beat(self) -> None: ...


def effective_status(rec: Mapping[str, Any], now: datetime | None = None) -> str:
    """A record's status, with a stale 'running' (no process, or no heartbeat for
    STALE_AFTER_S) read as 'failed'. The one judge of whether a recorded run is alive."""
    status = rec.get("status", "failed")
    if status != "running":
        return status
    pid = rec.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return "failed"  # no process could have written it: nothing runs it
    if rec.get("host") == socket.gethostname() and not _pid_alive(pid):
        return "failed"
    age = heartbeat_age_s(rec, now)
    if age is not None and age > STALE_AFTER_S:
        return "failed"
    return "running"


def heartbeat_age_s(rec: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Seconds since the record's heartbeat; None when it has none that can be read (a
    record from before heartbeats, or damaged: judged by its pid alone)."""
    try:
        beat = datetime.fromisoformat(str(rec["heartbeat_at"]))
    except (KeyError, ValueError):
        return None
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=timezone.utc)
    return ((now or datetime.now(timezone.utc)) - beat).total_seconds()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def keep_beating(writer: Beating | None, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Call ``writer.beat()`` every ``every_s`` from a thread while the block runs (nothing
    without a writer: a rank other than 0); the thread has stopped when the block ends."""
    if writer is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            writer.beat()

    thread = threading.Thread(target=beat, name="dpsuite-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
