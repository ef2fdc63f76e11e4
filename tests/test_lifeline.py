"""A worker whose launcher is gone exits within the grace period even when its main thread then
blocks in C while holding the GIL (as a process group's teardown with a vanished peer can): the
exit must not wait for a Python thread to run."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time

import pytest

from dpsuite.runtime import distributed

pytestmark = pytest.mark.multiproc


def _blocked_holding_the_gil(read_fd: int, write_fd: int) -> None:
    """Wait (as in a collective), and once told the launcher is gone, block in C holding the
    GIL (as a process group's teardown with a vanished peer can)."""
    os.close(write_fd)  # forked: only the launcher may hold the write end
    distributed.watch_launcher(read_fd)
    try:
        time.sleep(60)
    except distributed.LauncherGone:
        mutex = ctypes.create_string_buffer(64)  # a pthread_mutex_t, zeroed: a plain mutex
        libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL, as C++ holding it would
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # never returns, and no signal ends the wait


def test_a_worker_blocked_holding_the_gil_exits_once_its_launcher_is_gone(monkeypatch):
    monkeypatch.setattr(distributed, "LAUNCHER_GONE_GRACE_S", 2.0)
    read_fd, write_fd = os.pipe()
    worker = multiprocessing.get_context("fork").Process(
        target=_blocked_holding_the_gil, args=(read_fd, write_fd)
    )
    worker.start()
    os.close(read_fd)
    time.sleep(1.0)  # it waits now
    os.close(write_fd)  # the launcher ends
    worker.join(timeout=30)
    alive = worker.is_alive()
    if alive:
        worker.kill()
        worker.join()
    assert not alive and worker.exitcode == 1
