"""However the launcher of a multi-worker run ends (SIGTERM, Ctrl-C, SIGHUP, SIGKILL), nothing of
the run outlives it: its workers, its forkserver and the resource tracker end within seconds,
nothing prints a traceback, and run.json is not left `running`."""

from __future__ import annotations

import json
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
# "A few seconds", with a margin for a loaded machine (left over, they used to stay ~300 s).
GONE_WITHIN_S = 40.0
SETUP_TIMEOUT_S = 180.0


def session(sid: int) -> list[str]:
    """Every process of the run's session (they all stay in it): 'pid args' lines.

    Read from /proc rather than `ps`, whose lines are cut at $COLUMNS (80 where CI sets it): a
    longer checkout path pushed "multiprocessing.forkserver" past the cut."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue  # it ended while we looked
        # The command name in field 2 may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:  # fields 3.. are state, ppid, pgrp, session
            # A zombie has no command line: its name, from field 2, stands in.
            args = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"{proc.name} {args or stat[stat.index('(') : stat.rindex(')') + 1]}")
    return found


def forkserver_in(processes: list[str]) -> bool:
    return any("multiprocessing.forkserver" in p for p in processes)


def run_json(results_dir: Path) -> dict | None:
    for path in results_dir.rglob("run.json"):
        if ".attempts" in path.parts:
            continue
        try:
            return json.loads(path.read_text())
        except ValueError:
            return None  # between two writes? (they are atomic renames): look again
    return None


def wait_for(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def started(tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dpsuite", "run", *LONG_RUN, f"results_dir={tmp_path}"],
        cwd=REPO,
        stdout=open(tmp_path / "stdout", "w"),  # noqa: SIM115 - a worker may outlive a pipe
        stderr=open(tmp_path / "stderr", "w"),  # noqa: SIM115
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )


@pytest.mark.parametrize(
    "sig,group,code",
    [
        (signal.SIGTERM, False, 143),  # `timeout`, a scheduler
        (signal.SIGINT, True, 130),  # a terminal's Ctrl-C: to the whole process group
        (signal.SIGHUP, False, 129),  # the terminal closed
        (signal.SIGKILL, False, -9),  # nothing runs in the launcher: the workers must notice
    ],
    ids=["TERM", "INT", "HUP", "KILL"],
)
def test_nothing_of_the_run_outlives_its_launcher(tmp_path, sig, group, code):
    proc = started(tmp_path)
    try:
        # The signal lands while the forkserver imports torch, before it forks the workers
        # the launcher has asked for (where one used to be orphaned, and Ctrl-C made the
        # server print a traceback), or, for SIGKILL, once rank 0 holds the record, so that
        # it is the one to mark it.
        wait_for(lambda: forkserver_in(session(proc.pid)), "the forkserver", SETUP_TIMEOUT_S)
        if sig == signal.SIGKILL:
            rec = lambda: run_json(tmp_path) or {}  # noqa: E731
            wait_for(lambda: "num_params" in rec(), "rank 0's setup", SETUP_TIMEOUT_S)
        (os.killpg if group else os.kill)(proc.pid, sig)
        proc.wait(timeout=60)
        left = session(proc.pid)
        deadline = time.monotonic() + GONE_WITHIN_S
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = session(proc.pid)
    finally:
        if proc.poll() is None or session(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)  # only what this test started: its session
    assert not left, f"still there {GONE_WITHIN_S:.0f} s after the launcher ended: {left}"
    assert proc.returncode == code
    err = (tmp_path / "stderr").read_text()
    assert "Traceback" not in err, err
    if sig != signal.SIGKILL:
        assert len(err.strip().splitlines()) == 1 and err.startswith("dpsuite: "), err
    rec = run_json(tmp_path)
    assert rec is not None and rec["status"] == "failed", rec
    assert rec["error"].startswith("interrupted"), rec["error"]
