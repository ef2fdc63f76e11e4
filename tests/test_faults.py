"""Faults during a run: a worker killed, the launcher interrupted. Nothing may hang or be lost."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SMALL

pytestmark = pytest.mark.multiproc

LONG_RUN = [*SMALL, "workers=2", "train.epochs=100000", "train.evals_per_epoch=1"]


def start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dpsuite", "run", *LONG_RUN, f"results_dir={tmp_path}", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )


def wait_until_training(tmp_path: Path, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for csv in tmp_path.rglob("epochs.csv"):
            if len(csv.read_text().splitlines()) >= 3:  # header, epoch 0, epoch 1
                return csv.parent
        time.sleep(0.2)
    raise AssertionError("the run never started training")


def wait_or_explain(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Wait for the command to end; if it does not, fail with what its processes were doing
    (state and kernel wait channel of each) and what it printed, instead of a bare timeout."""
    try:
        proc.wait(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        tree = subprocess.run(
            ["ps", "-o", "pid,ppid,stat,wchan:32,etime,args", "-g", str(proc.pid)],
            capture_output=True,
            text=True,
        ).stdout
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    raise AssertionError(
        f"still running after {timeout:.0f} s:\n{tree}\nstdout:\n{out}\nstderr:\n{err}"
    )


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def workers_of(pid: int) -> list[int]:
    """The launcher's workers: children it spawned, or children of its forkserver."""
    found = []
    for child in children(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmd:
            found.append(child)
        elif b"multiprocessing.forkserver" in cmd:
            found.extend(children(child))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[1].split()[0] == "Z")


@pytest.mark.parametrize(
    "sig,cause",
    [
        (signal.SIGKILL, "worker 1 died (SIGKILL)"),
        # Its sibling then fails too ("Connection reset by peer"): the first cause is named.
        (signal.SIGTERM, "worker 1 died (SIGTERM)"),
        (signal.SIGSTOP, "no progress from rank 1 for 10 s: its process is stopped"),
    ],
    ids=["SIGKILL", "SIGTERM", "SIGSTOP"],
)
def test_a_failing_worker_fails_the_run_quickly_naming_it_and_stops_its_sibling(
    tmp_path, sig, cause
):
    proc = start(tmp_path)
    try:
        run_dir = wait_until_training(tmp_path)
        workers = workers_of(proc.pid)
        assert len(workers) == 2, workers
        t0 = time.monotonic()
        os.kill(workers[1], sig)
        wait_or_explain(proc)
        detected_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "failed"
    assert rec["error"].startswith(cause), rec["error"]
    assert proc.returncode == 1
    assert proc.stderr.read().count(": failed:") == 1, "the failure is said once"
    assert not any(alive(w) for w in workers), "the surviving worker must be stopped"
    assert len((run_dir / "epochs.csv").read_text().splitlines()) >= 3, "measured epochs kept"
    assert not list((tmp_path / ".dpsuite-tmp").iterdir()), "rendezvous files removed"
    print(f"{cause}: detected and run ended in {detected_s:.1f}s")


def test_the_commands_tests_start_can_be_interrupted():
    """Ctrl-C tests mean something only if SIGINT reaches the command: not ignored, as it is for
    everything started in the background by a non-interactive shell (tests/conftest.py)."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    assert out.strip() == "False"


def test_ctrl_c_stops_workers_marks_the_run_and_exits_130(tmp_path):
    proc = start(tmp_path)
    try:
        run_dir = wait_until_training(tmp_path)
        workers = workers_of(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        wait_or_explain(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert not any(alive(w) for w in workers)
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "failed" and rec["error"] == "interrupted"


def test_sigterm_of_the_launcher_alone_leaves_no_orphans(tmp_path):
    proc = start(tmp_path)
    try:
        run_dir = wait_until_training(tmp_path)
        workers = workers_of(proc.pid)
        proc.send_signal(signal.SIGTERM)
        wait_or_explain(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143
    deadline = time.monotonic() + 30
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(w) for w in workers)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"


def _forked_child_temp_dir(out: Path) -> None:
    import multiprocessing.util

    out.write_text(multiprocessing.util.get_temp_dir())


def _worker_forks_a_child(local_rank: int, init_method: str, out: str) -> None:
    """As a rank whose DataLoader forks its loader workers."""
    child = multiprocessing.get_context("fork").Process(
        target=_forked_child_temp_dir, args=(Path(out, f"rank{local_rank}.txt"),)
    )
    child.start()
    child.join()


def test_processes_a_worker_forks_keep_their_temporary_files_in_a_directory_of_their_own(
    tmp_path,
):
    """A loader worker's socket for handing a batch's file descriptors to its rank lives in its
    multiprocessing temporary directory. It must not be the launcher's, which the launcher
    removes as it exits: after a failed run, loader workers still ending would each print a
    FileNotFoundError traceback."""
    import multiprocessing.util

    from dpsuite.runtime import distributed

    distributed.spawn_local(_worker_forks_a_child, (str(tmp_path),), 2, 1)
    launchers = multiprocessing.util.get_temp_dir()  # made for the forkserver's socket
    for rank in (0, 1):
        own = (tmp_path / f"rank{rank}.txt").read_text()
        assert Path(own).parent == Path(launchers).parent and own != launchers
        assert not Path(own).exists(), "removed by the process that made it, as it exited"
