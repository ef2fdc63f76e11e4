"""Two commands on one results directory: the second is refused with one line, before any work.
The lock never outlives its holder: it is free after a normal end and after a SIGKILL."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dpsuite.results.lock import LOCK_FILE
from tests.conftest import REPO, SMALL, run_subprocess

TINY = [*SMALL, "mode=simulated", "train.max_steps=2", "timing.calibration_steps=0"]
# Holds the lock of the directories given, as a sweep does, until it is killed.
HOLDER = """
import sys, time
from dpsuite.results.lock import locked
with locked(sys.argv[1:], "dpsuite sweep convergence"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def hold():
    """Start a process that holds the lock of some directories; killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(*dirs: Path) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, *map(str, dirs)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def lock_is_free(directory: Path) -> bool:
    """True when nobody (this process included) holds the directory's lock."""
    if not (directory / LOCK_FILE).exists():
        return True
    fd = os.open(directory / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def refusal(err: str, directory: Path, holder: subprocess.Popen) -> str:
    line = err.strip()
    assert line.count("\n") == 0, err
    assert line.startswith(
        f"dpsuite: error: {directory} is in use by another dpsuite command "
        f"(pid {holder.pid} on {socket.gethostname()}, started "
    ), line
    assert line.endswith(": dpsuite sweep convergence); wait for it or choose another results_dir")
    return line


@pytest.mark.multiproc
def test_a_second_command_on_a_held_directory_is_refused_before_any_work(
    dpsuite, tmp_path, capsys, hold
):
    res, demo = tmp_path / "res", tmp_path / "demo"
    holder = hold(res, demo / "convergence")

    # A real second process, as a user would start it.
    proc = run_subprocess("run", *TINY, f"results_dir={res}")
    assert proc.returncode == 2
    refusal(proc.stderr, res, holder)
    # A sweep, and a composite preset one of whose parts is held.
    assert dpsuite("run", "-m", *TINY, "seed=0,1", f"results_dir={res}") == 2
    refusal(capsys.readouterr().err, res, holder)
    assert dpsuite("sweep", "demo", f"results_dir={demo}") == 2
    refusal(capsys.readouterr().err, demo / "convergence", holder)
    assert not [p for p in tmp_path.rglob("*") if p.name in ("run.json", "sweep.json", ".hydra")]
    assert lock_is_free(demo / "scaling"), "a refused command holds nothing"

    # Another results directory is not affected.
    assert dpsuite("run", *TINY, f"results_dir={tmp_path / 'other'}") == 0


def test_the_lock_is_free_after_a_normal_end_and_after_sigkill(dpsuite, tmp_path, hold):
    res = tmp_path / "res"
    assert dpsuite("run", *TINY, f"results_dir={res}") == 0
    assert lock_is_free(res)

    holder = hold(res)
    assert not lock_is_free(res)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert lock_is_free(res)  # nothing to clean up by hand


def test_ranks_that_join_a_run_do_not_take_the_lock(dpsuite, tmp_path, hold, monkeypatch):
    """Under torchrun every rank runs `dpsuite run`: they are one run, not rival commands."""
    res = tmp_path / "res"
    hold(res)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(key, value)
    assert dpsuite("run", *SMALL, "train.max_steps=2", f"results_dir={res}") == 0


def test_a_filelock_user_on_the_same_file_waits_for_the_holder(tmp_path, hold):
    """The lock is filelock's native one: a tool that locks the directory with
    ``filelock.FileLock`` contends with a dpsuite command (and gets it once the command ends)."""
    import filelock

    res = tmp_path / "res"
    holder = hold(res)
    other = filelock.FileLock(res / LOCK_FILE, timeout=0)
    with pytest.raises(filelock.Timeout):
        other.acquire()
    holder.kill()
    holder.wait()
    with other:
        assert not lock_is_free(res)
    assert lock_is_free(res)
