"""Progress reporting: plain lines for logs, rich bars on terminals, events relayed from workers."""

import io
import subprocess
import sys
import time

import pytest
from rich.console import Console

from dpsuite import progress
from dpsuite.engine import data_memo
from dpsuite.workloads import get_workload
from tests.conftest import REPO

ROW = {
    "epoch": 1.0,
    "step": 50,
    "lr": 0.05,
    "train_loss": 1.5,
    "eval_loss": 1.4,
    "eval_acc": 0.625,
    "wall_s": 3.2,
}


def test_plain_reporter_writes_periodic_lines():
    out = io.StringIO()
    r = progress.PlainReporter(stream=out, interval_s=0.0)
    r.sweep_started("demo", total=3, done=1)
    r.run_started("run-a", total_steps=100, steps_per_epoch=50)
    r.run_step(10, 2.0)
    r.run_evaluated({**ROW, "eval_acc": 0.5})  # the last relayed event may be stale...
    r.run_finished("run-a", "complete", "eval_acc 62.50%")  # ...the run's record is not
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep demo: 3 runs, 1 already complete"
    assert lines[1].startswith("[run-a] step 10/100  epoch 0.20")
    assert "epoch 1.00/2" in lines[2] and "eval_acc 50.00%" in lines[2]
    assert lines[3].startswith("[2/3] run-a: complete  eval_acc 62.50%") and "ETA" in lines[3]


def test_plain_reporter_throttles_step_lines():
    out = io.StringIO()
    r = progress.PlainReporter(stream=out, interval_s=3600)
    r.run_started("run-a", 100, 50)
    for step in range(10, 100, 10):
        r.run_step(step, 1.0)
    assert out.getvalue() == ""


def test_rich_reporter_draws_sweep_and_run_bars():
    buf = io.StringIO()
    r = progress.RichReporter(console=Console(file=buf, force_terminal=True, width=160))
    r.sweep_started("convergence", total=2, done=0)
    r.run_started("run-a", 100, 50)
    r.run_evaluated(ROW)
    r.bars.refresh()
    r.run_finished("run-a", "diverged")
    r.close()
    text = buf.getvalue()
    assert "sweep convergence" in text and "run-a" in text
    assert "50/100" in text and "acc 62.50%" in text and "run-a: diverged" in text
    assert r.bars.tasks[0].completed == 1


def test_events_from_a_child_process_reach_the_parent_reporter():
    received = []

    class Recorder(progress.Reporter):
        def run_started(self, run_id, total_steps, steps_per_epoch):
            received.append(("start", run_id, total_steps))

        def run_evaluated(self, row):
            received.append(("eval", row["eval_acc"]))

    child = (
        "from dpsuite import progress\n"
        "r = progress.current()\n"
        "r.run_started('run-x', 7, 1)\n"
        "r.run_evaluated({'eval_acc': 0.5, 'step': 7})\n"
    )
    with progress.activated(Recorder()), progress.relay_from_children():
        subprocess.run([sys.executable, "-c", child], cwd=REPO, check=True)
        deadline = time.monotonic() + 5
        while len(received) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert received == [("start", "run-x", 7), ("eval", 0.5)]


def test_dataset_is_loaded_once_per_process_for_equal_data(data_cache):
    data_memo.clear()
    mlp = get_workload("mnist1d_mlp", cache_dir=data_cache, num_samples=2000)
    cnn = get_workload("mnist1d_cnn", cache_dir=data_cache, num_samples=2000)
    other = get_workload("mnist1d_mlp", cache_dir=data_cache, num_samples=2200)
    first = data_memo.load_data(mlp)
    assert data_memo.load_data(cnn) is first  # the same generated data
    assert data_memo.load_data(other) is not first
    assert data_memo.load_data(other).num_train == 1760


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sweep_of_two_shapes(clock: Clock) -> tuple[progress.PlainReporter, io.StringIO]:
    """Three runs on 1 worker, then three on 2 workers (twice the work each), 100 steps."""
    out = io.StringIO()
    r = progress.PlainReporter(stream=out, interval_s=0.0)
    r.state.clock = clock
    one = progress.RunCost(("mnist1d_mlp", "ddp", 32, 1), 1 * 100)
    two = progress.RunCost(("mnist1d_mlp", "ddp", 32, 2), 2 * 100)
    costs = {"a1": one, "a2": one, "a3": one, "b1": two, "b2": two, "b3": two}
    r.sweep_started("scaling", total=6, done=0, costs=costs)
    return r, out


def test_eta_comes_from_the_expected_cost_of_the_runs_left():
    clock = Clock()
    r, out = sweep_of_two_shapes(clock)
    for run_id in ("a1", "a2", "a3"):
        clock.now += 2.0  # 0.02 s per unit of work
        r.run_finished(run_id, "complete")
    lines = out.getvalue().splitlines()
    assert lines[1] == "[1/6] a1: complete  (2.0s wall)  sweep ETA 16s"  # 2x100 + 3x200 units
    assert lines[3] == "[3/6] a3: complete  (2.0s wall)  sweep ETA 12s"  # not 6 s: b is 2x a
    clock.now += 14.0  # the first 2-worker run: start-up included, 0.07 s per unit
    r.run_finished("b1", "complete")
    assert out.getvalue().splitlines()[-1] == "[4/6] b1: complete  (14.0s wall)  sweep ETA 28s"
    clock.now += 5.0  # 5 s into the next run, the ETA counts down
    assert r.state.eta_s() == pytest.approx(23.0)


def test_a_run_s_wall_time_includes_its_start_up():
    """From its launch (the previous run's end, or the start of the command) to its end, not
    from its first step."""
    clock = Clock()
    r, out = sweep_of_two_shapes(clock)
    clock.now = 10.0  # processes spawned, data and model built ...
    r.run_started("a1", total_steps=100, steps_per_epoch=50)
    clock.now = 12.0
    r.run_finished("a1", "complete")
    assert "a1: complete  (12.0s wall)" in out.getvalue()


def test_rich_sweep_bar_shows_the_cost_based_eta():
    clock = Clock()
    buf = io.StringIO()
    r = progress.RichReporter(console=Console(file=buf, force_terminal=True, width=160))
    r.state.clock = clock
    cost = progress.RunCost(("tiny_gpt", "ddp", 32, 1), 100)
    r.sweep_started("demo", total=3, done=0, costs={"a": cost, "b": cost, "c": cost})
    clock.now = 30.0
    r.run_finished("a", "complete")
    r.bars.refresh()
    r.close()
    assert "0:01:00" in buf.getvalue()  # two more runs of 30 s
