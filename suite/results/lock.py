"""One launching command per results directory: an exclusive lock held for the whole command.

Two sweeps writing one results directory at once would race on its runs and its manifest. The
process that starts a sweep or a run takes an exclusive, non-blocking lock on
``RESULTS_DIR/.dpsuite.lock`` (``filelock``'s native lock over the file's descriptor: ``flock``
on Unix) and keeps it until the command ends; a second command on the same directory is refused
with one line naming the holder. filelock's soft (marker-file) locks are not used: a killed
holder would leave a stale marker behind, whereas the kernel drops a native lock when its process
ends, however it ends (SIGKILL included), so there is never a stale lock to remove by hand. The
file itself stays (removing it would let two processes lock two different files); its content
only says who held it last.

Only the top-level command locks: ranks that join a run from torchrun or srun are several
processes of one run, and the jobs of a SLURM sweep run under the sweep that holds the lock.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import filelock

from dpsuite.errors import ResultsWriteError, UserError
from dpsuite.results.store import SCRATCH_DIR, now_iso

LOCK_FILE = ".dpsuite.lock"
# Filesystems without flock support (some network mounts): run unlocked, with a warning.
UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)

_held: set[Path] = set()  # directories this process holds, so that nested holds are no-ops


@contextlib.contextmanager
def locked(dirs: Iterable[str | Path], command: str) -> Iterator[None]:
    """Hold every directory of ``dirs`` (created if needed) until the block ends.

    Raises UserError, before anything runs, when another process holds one of them.
    """
    by_path = {Path(d).expanduser().resolve(): Path(d) for d in dirs}  # one lock per directory
    with contextlib.ExitStack() as stack:
        for directory in sorted(by_path):
            if directory not in _held:
                stack.enter_context(_hold(directory, by_path[directory], command))
        yield


def for_launcher(dirs: Iterable[str | Path], command: str) -> contextlib.AbstractContextManager:
    """The lock of a command started by the user; none for a rank that joins a run."""
    from dpsuite.runtime.ranks import ranks_from_env

    if ranks_from_env() is not None:
        return contextlib.nullcontext()
    return locked(dirs, command)


@contextlib.contextmanager
def _hold(directory: Path, given: Path, command: str) -> Iterator[None]:
    """Lock ``directory`` (named ``given`` in messages, as the user wrote it)."""
    path = directory / LOCK_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # No O_TRUNC: the file may say who holds it, and we do not hold it yet.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ResultsWriteError(path, exc) from None
    try:
        if not _try_lock(fd, path):
            raise UserError(
                f"{given} is in use by another dpsuite command ({_holder(fd)}); "
                "wait for it or choose another results_dir"
            )
        _write_holder(fd, path, command)
        # Scratch files of a command that was killed: nobody else can be using them now.
        shutil.rmtree(directory / SCRATCH_DIR, ignore_errors=True)
        _held.add(directory)
        try:
            yield
        finally:
            _held.discard(directory)
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _try_lock(fd: int, path: Path) -> bool:
    """True when this process now holds the lock, False when another one does."""
    try:
        if not filelock.lock_descriptor(fd, blocking=False):
            return False
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise ResultsWriteError(path, exc) from None
        warnings.warn(
            f"cannot lock {path} ({exc.strerror}): two commands on this results_dir at once "
            "would not be detected",
            stacklevel=3,
        )
    return True


def _write_holder(fd: int, path: Path, command: str) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": now_iso(),
        "command": command[:500],
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
    except OSError as exc:
        raise ResultsWriteError(path, exc) from None


def _holder(fd: int) -> str:
    """Who holds the lock, as the holder wrote it (it may not have written it yet)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return (
            f"pid {info['pid']} on {info['host']}, started {info['started_at']}: {info['command']}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
