"""A report's figures drawn in forked processes: every figure once, in order, errors raised in
the report's process, and no child left behind however the report ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dpsuite.analysis.report import figure_processes

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or not Path("/proc/self/stat").exists(), reason="forks; reads /proc"
)


def children_of(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


@pytest.fixture
def four_processes(monkeypatch):
    monkeypatch.setattr(figure_processes, "available_cores", lambda: 4)


def test_every_plot_is_saved_once_in_order_while_the_report_does_its_own_work(
    tmp_path, four_processes
):
    report = os.getpid()

    def save(index: int) -> str | None:
        if index % 5 == 0:
            return None  # nothing to draw
        (tmp_path / f"{index}.txt").write_text(str(os.getpid()))
        return f"{index}.png"

    def meanwhile() -> None:  # the report's own work, while its children draw
        (tmp_path / "meanwhile").write_text(str(os.getpid()))
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("*.txt")) and time.monotonic() < deadline:
            time.sleep(0.01)

    before = children_of(report)
    names = figure_processes.save_all(list(range(12)), save, meanwhile)

    assert names == [None if i % 5 == 0 else f"{i}.png" for i in range(12)]
    drawers = {(tmp_path / f"{i}.txt").read_text() for i in range(12) if i % 5}
    assert drawers - {str(report)}, "no child drew"
    assert (tmp_path / "meanwhile").read_text() == str(report)
    assert children_of(report) == before  # (earlier tests' processes may live on)


def test_few_plots_are_drawn_here():
    pids = []
    figure_processes.save_all([0, 1], lambda i: pids.append(os.getpid()) or "x.png")
    assert pids == [os.getpid()] * 2


def test_an_error_in_a_childs_plot_is_raised_here(four_processes):
    report = os.getpid()

    def save(index: int) -> str:
        if index == 5:
            raise ValueError(
                f"plot 5 failed in {'the report' if os.getpid() == report else 'a child'}"
            )
        return f"{index}.png"

    before = children_of(report)
    with pytest.raises(ValueError, match="plot 5 failed in the report"):
        figure_processes.save_all(list(range(12)), save)
    assert children_of(report) == before


def test_a_stuck_child_is_stopped_and_its_share_drawn_here(monkeypatch, four_processes):
    monkeypatch.setattr(figure_processes, "MIN_DEADLINE_S", 1.0)
    report = os.getpid()

    def save(index: int) -> str:
        if os.getpid() != report:  # every child is stuck on its first plot
            time.sleep(3600)
        return f"{index}.png"

    before, started = children_of(report), time.monotonic()
    names = figure_processes.save_all(list(range(12)), save)
    assert names == [f"{i}.png" for i in range(12)]
    assert time.monotonic() - started < 30
    assert children_of(report) == before


def test_children_stopped_mid_save_unwind_and_leave_no_temporary_file(tmp_path, four_processes):
    report = os.getpid()

    def save(index: int) -> str:
        if os.getpid() != report:  # each child writes a file that takes forever
            partial = tmp_path / f".{index}.png.tmp"
            partial.write_text("half")
            try:
                time.sleep(3600)
            finally:
                partial.unlink()
        raise ValueError("a plot of the report's own failed")

    def meanwhile() -> None:  # until the three children are mid-save
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob(".*.tmp"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)

    before = children_of(report)
    with pytest.raises(ValueError, match="own failed"):
        figure_processes.save_all(list(range(12)), save, meanwhile)
    assert children_of(report) == before
    assert list(tmp_path.iterdir()) == []


KILLED_REPORT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from dpsuite.analysis.report import figure_processes
    figure_processes.available_cores = lambda: 2
    out = Path(sys.argv[1])

    def save(index):
        time.sleep(0.3)
        (out / f"{index}-{os.getpid()}").write_text("")
        return f"{index}.png"

    print(os.getpid(), flush=True)
    figure_processes.save_all(list(range(200)), save)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_children_end_soon_after_the_report_is_killed(tmp_path, sig):
    script = tmp_path / "report.py"
    script.write_text(KILLED_REPORT)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE)
    try:
        parent = int(proc.stdout.readline())
        deadline = time.monotonic() + 30
        while not (kids := children_of(parent)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kids, "no child was forked"
        time.sleep(1.0)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(not zombie(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = [k for k in kids if not zombie(k)]
    finally:
        proc.kill()
        proc.wait()
    assert alive == []
    written = len(list(out.iterdir()))
    time.sleep(1.0)
    assert len(list(out.iterdir())) == written  # nothing writes after the report is gone


def zombie(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie its new parent has not reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_a_report_is_the_same_bytes_drawn_in_one_process_or_four(tmp_path, monkeypatch):
    from dpsuite.analysis.report.build import build_report
    from tests import report_trees

    report_trees.write_scaling(tmp_path / "results")
    report_trees.write_convergence(tmp_path / "results")
    monkeypatch.setattr(figure_processes, "available_cores", lambda: 1)
    build_report(tmp_path / "results", tmp_path / "one")
    monkeypatch.setattr(figure_processes, "available_cores", lambda: 4)
    build_report(tmp_path / "results", tmp_path / "four")

    files = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert sum(name.endswith(".png") for name in files) >= 2 * figure_processes.PLOTS_PER_PROCESS
    assert files == sorted(p.name for p in (tmp_path / "four").iterdir())
    for name in files:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "four" / name).read_bytes()
