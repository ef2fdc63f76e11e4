"""Progress of sweeps and runs: rich progress bars on a terminal, plain periodic lines in logs.

The training loop (rank 0) and the sweep report events to ``current()``, a ``Reporter``:

* ``sweep_started(label, total, done, costs)`` once per sweep (``costs``: each run to do's
  expected cost, for the ETA), ``run_finished(run_id, status, detail)``
  per run (the sweep reads it from the run's run.json), ``note(text)`` for news such as a run's
  SLURM job starting;
* ``run_started(run_id, total_steps, steps_per_epoch)``, then ``run_step(step, train_loss)`` at
  the loss checks where ``wants_step_loss()`` says it would be shown, and
  ``run_evaluated(row)`` at each evaluation (a row without ``eval_acc``: a run on random
  inputs, whose accuracy is not shown).

Worker processes started by ``torch.multiprocessing`` do not share the parent's terminal display:
``relay_from_children()`` makes their events come back to the parent over a local datagram
socket, so a run on N spawned workers shows in the same progress bars as an in-process run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

RELAY_ENV = "DPSUITE_PROGRESS_RELAY"
STEP_LINE_INTERVAL_S = 30.0  # plain output: at most one line per interval between evaluations
STEP_RELAY_INTERVAL_S = 0.1  # a worker relays its step at most this often (a display's refresh)


@dataclass(frozen=True)
class RunCost:
    """What a run is expected to cost: ``units`` of work (workers x steps, from its config) of
    a ``shape`` (workload, mode, per-worker batch, workers) whose seconds per unit the finished
    runs tell."""

    shape: tuple
    units: float


class Reporter:
    """Receives progress events. This base class ignores them (used on ranks other than 0)."""

    def sweep_started(
        self, label: str, total: int, done: int, costs: Mapping[str, RunCost] | None = None
    ) -> None:
        """A sweep of ``total`` runs starts; ``done`` of them are already complete; ``costs``
        holds the expected cost of each run to do (by run id)."""

    def run_started(self, run_id: str, total_steps: int, steps_per_epoch: int) -> None:
        pass

    def wants_step_loss(self) -> bool:
        """Whether ``run_step`` would show the loss now: the loop reads it from the device only
        then (a check that shows nothing costs the step less)."""
        return False

    def run_step(self, step: int, train_loss: float) -> None:
        pass

    def run_evaluated(self, row: Mapping[str, Any]) -> None:
        pass

    def run_finished(self, run_id: str, status: str, detail: str = "") -> None:
        """A run ended with ``status`` (``skipped`` when it was already complete)."""

    def note(self, text: str) -> None:
        """One line of news about the sweep (a job submitted, started, ...)."""

    def close(self) -> None:
        pass


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


class _RunState:
    """What a reporter remembers about the run in progress and the sweep around it."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.run_id = ""
        self.total_steps = 0
        self.steps_per_epoch = 1
        self.last_row: Mapping[str, Any] = {}
        self.sweep_total = 0
        self.sweep_done = 0
        # When the run now in progress was launched: runs start one after the other, so each
        # starts when the one before ended (its start-up, data and model building included).
        self.launched_at = self.clock()
        self.costs: dict[str, RunCost] = {}
        self.measured: list[tuple[RunCost, float]] = []  # finished runs: cost, wall seconds
        self.ended: set[str] = set()

    def start_sweep(self, total: int, done: int, costs: Mapping[str, RunCost] | None) -> None:
        self.sweep_total, self.sweep_done = total, done
        self.launched_at = self.clock()
        self.costs = dict(costs or {})

    def epochs(self) -> float:
        return self.total_steps / max(self.steps_per_epoch, 1)

    def seconds_per_unit(self, shape: tuple) -> float | None:
        """Wall seconds per unit of work, from the finished runs most like ``shape``: of the
        same shape, else the same workload, mode and per-worker batch, else the same
        workload, else any."""
        for length in (len(shape), 3, 1, 0):
            alike = [(c, wall) for c, wall in self.measured if c.shape[:length] == shape[:length]]
            units = sum(c.units for c, _ in alike)
            if alike and units > 0:
                return sum(wall for _, wall in alike) / units
        return None

    def eta_s(self) -> float | None:
        """Seconds until the sweep ends: the expected cost of every run not yet ended (the
        current one less the time it has run); None until a run has ended to calibrate it."""
        remaining = self.sweep_total - self.sweep_done
        if remaining <= 0 or not self.measured:
            return None
        todo = [c for run_id, c in self.costs.items() if run_id not in self.ended]
        if not todo:  # no costs known: the mean wall time of the runs so far
            mean = sum(wall for _, wall in self.measured) / len(self.measured)
            return max(mean * remaining - self.current_wall(), 0.0)
        expected = 0.0
        for cost in todo:
            rate = self.seconds_per_unit(cost.shape)
            expected += cost.units * (rate or 0.0)
        return max(expected - self.current_wall(), 0.0)

    def current_wall(self) -> float:
        return self.clock() - self.launched_at

    def finish_line(self, run_id: str, status: str, detail: str = "", wall: float | None = None):
        parts = [f"{run_id}: {status}"]
        if detail:  # what the run's own record says
            parts.append(detail)
        if wall is not None:
            parts.append(f"({_fmt_duration_precise(wall)} wall)")
        return "  ".join(parts)

    def count_finished(self, run_id: str, status: str) -> float | None:
        """Note a run's end; returns its wall time since launch (None for a skipped run)."""
        if status == "skipped":
            return None
        now = self.clock()
        wall = now - self.launched_at
        self.launched_at = now
        if run_id in self.costs and run_id not in self.ended:
            self.measured.append((self.costs[run_id], wall))
        elif not self.costs:
            self.measured.append((RunCost((), 0.0), wall))
        self.ended.add(run_id)
        if self.sweep_total:
            self.sweep_done += 1
        return wall


def _fmt_duration_precise(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 60 else _fmt_duration(seconds)


class PlainReporter(Reporter):
    """Plain lines for logs: one per evaluation, one per finished run, and a heartbeat."""

    def __init__(self, stream: TextIO | None = None, interval_s: float = STEP_LINE_INTERVAL_S):
        self.stream = stream
        self.interval_s = interval_s
        self.state = _RunState()
        self.last_line = time.monotonic()

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)
        self.last_line = time.monotonic()

    def sweep_started(
        self, label: str, total: int, done: int, costs: Mapping[str, RunCost] | None = None
    ) -> None:
        self.state.start_sweep(total, done, costs)
        self._print(f"sweep {label}: {total} runs, {done} already complete")

    def run_started(self, run_id: str, total_steps: int, steps_per_epoch: int) -> None:
        s = self.state
        s.run_id, s.total_steps, s.steps_per_epoch = run_id, total_steps, steps_per_epoch
        s.last_row = {}

    def wants_step_loss(self) -> bool:
        return time.monotonic() - self.last_line >= self.interval_s

    def run_step(self, step: int, train_loss: float) -> None:
        if not self.wants_step_loss():
            return
        s = self.state
        self._print(
            f"[{s.run_id}] step {step}/{s.total_steps}  epoch {step / s.steps_per_epoch:.2f}"
            f"  train_loss {_fmt(train_loss, '.4f')}"
        )

    def run_evaluated(self, row: Mapping[str, Any]) -> None:
        s = self.state
        s.last_row = row
        acc = f"  eval_acc {_fmt(100 * row['eval_acc'], '.2f')}%" if "eval_acc" in row else ""
        self._print(
            f"[{s.run_id}] epoch {row['epoch']:.2f}/{s.epochs():g}  step {row['step']}"
            f"  lr {_fmt(row['lr'], '.4g')}  train_loss {_fmt(row['train_loss'], '.4f')}"
            f"  eval_loss {_fmt(row['eval_loss'], '.4f')}{acc}  ({row['wall_s']:.1f}s)"
        )

    def run_finished(self, run_id: str, status: str, detail: str = "") -> None:
        s = self.state
        line = s.finish_line(run_id, status, detail, s.count_finished(run_id, status))
        if s.sweep_total:
            eta = s.eta_s()
            line = f"[{s.sweep_done}/{s.sweep_total}] {line}"
            if eta is not None:
                line += f"  sweep ETA {_fmt_duration(eta)}"
        self._print(line)

    def note(self, text: str) -> None:
        self._print(text)


class RichReporter(Reporter):
    """Progress bars on a terminal: the sweep (runs done / total, ETA) and the current run."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.state = _RunState()
        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            _eta_column(self.state),
            TextColumn("{task.fields[info]}"),
            console=console or Console(),
        )
        self.sweep_task: Any = None
        self.run_task: Any = None
        self.started = False

    def _ensure_started(self) -> None:
        if not self.started:
            self.bars.start()
            self.started = True

    def sweep_started(
        self, label: str, total: int, done: int, costs: Mapping[str, RunCost] | None = None
    ) -> None:
        self._ensure_started()
        self.state.start_sweep(total, done, costs)
        self.sweep_task = self.bars.add_task(
            f"sweep {label}", total=total, completed=done, info="runs", sweep=True
        )

    def run_started(self, run_id: str, total_steps: int, steps_per_epoch: int) -> None:
        self._ensure_started()
        s = self.state
        s.run_id, s.total_steps, s.steps_per_epoch = run_id, total_steps, steps_per_epoch
        s.last_row = {}
        if self.run_task is not None:
            self.bars.remove_task(self.run_task)
        self.run_task = self.bars.add_task(run_id, total=total_steps, info="steps")

    def wants_step_loss(self) -> bool:
        return self.run_task is not None

    def run_step(self, step: int, train_loss: float) -> None:
        if self.run_task is None:
            return
        s = self.state
        self.bars.update(
            self.run_task,
            completed=step,
            info=f"epoch {step / s.steps_per_epoch:.2f}/{s.epochs():g}"
            f"  loss {_fmt(train_loss, '.4f')}{self._acc()}",
        )

    def _acc(self) -> str:
        """The last evaluation's accuracy; nothing before one, or when a run shows none."""
        if "eval_acc" not in self.state.last_row:
            return ""
        return f"  acc {_fmt(100 * self.state.last_row['eval_acc'], '.2f')}%"

    def run_evaluated(self, row: Mapping[str, Any]) -> None:
        self.state.last_row = row
        self.run_step(int(row["step"]), row.get("train_loss", math.nan))

    def run_finished(self, run_id: str, status: str, detail: str = "") -> None:
        s = self.state
        wall = s.count_finished(run_id, status)
        self._ensure_started()
        self.bars.console.print(s.finish_line(run_id, status, detail, wall), markup=False)
        if self.sweep_task is not None and status != "skipped":
            self.bars.advance(self.sweep_task)
        if self.run_task is not None and run_id == s.run_id:
            self.bars.remove_task(self.run_task)
            self.run_task = None

    def note(self, text: str) -> None:
        self._ensure_started()
        self.bars.console.print(text, markup=False)  # paths and errors may hold [brackets]

    def close(self) -> None:
        if self.started:
            self.bars.stop()
            self.started = False


def _eta_column(state: _RunState) -> Any:
    """The bars' ETA: the sweep's from the expected cost of its runs still to end (counting
    down between runs), a run's from its steps per second."""
    from rich.progress import TimeRemainingColumn
    from rich.text import Text

    class EtaColumn(TimeRemainingColumn):
        def render(self, task: Any) -> Text:
            if not task.fields.get("sweep"):
                return super().render(task)
            eta = state.eta_s()
            shown = "-:--:--" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
            return Text(shown.removeprefix("0"), style="progress.remaining")

    return EtaColumn()


class RelayClient(Reporter):
    """In a spawned worker: send events to the parent process (best effort, never blocking)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.last_step = -math.inf  # monotonic time of the last step relayed

    def _send(self, name: str, *args: Any) -> None:
        # The display is not worth slowing or failing a run for: drop what cannot be sent.
        with contextlib.suppress(OSError):
            self.sock.sendto(json.dumps([name, args]).encode(), self.address)

    def run_started(self, run_id: str, total_steps: int, steps_per_epoch: int) -> None:
        self._send("run_started", run_id, total_steps, steps_per_epoch)

    def wants_step_loss(self) -> bool:
        return time.monotonic() - self.last_step >= STEP_RELAY_INTERVAL_S

    def run_step(self, step: int, train_loss: float) -> None:
        self.last_step = time.monotonic()
        self._send("run_step", step, train_loss)

    def run_evaluated(self, row: Mapping[str, Any]) -> None:
        self._send("run_evaluated", dict(row))

    def close(self) -> None:
        self.sock.close()


RELAYED = ("run_started", "run_step", "run_evaluated")


def for_terminal(stream: TextIO | None = None) -> Reporter:
    """Rich bars when ``stream`` (stdout) is an interactive terminal, plain lines otherwise."""
    stream = stream or sys.stdout
    if stream.isatty() and os.environ.get("TERM") != "dumb":
        return RichReporter()
    return PlainReporter()


_current: Reporter | None = None


def current() -> Reporter:
    """The reporter events go to: the one activated, a relay to the parent, or a default."""
    global _current
    if _current is None:
        address = os.environ.get(RELAY_ENV)
        _current = RelayClient(address) if address else for_terminal()
    return _current


@contextlib.contextmanager
def activated(reporter: Reporter) -> Iterator[Reporter]:
    """Send events to ``reporter`` inside the block, then close it."""
    global _current
    previous, _current = _current, reporter
    try:
        yield reporter
    finally:
        reporter.close()
        _current = previous


# A Unix socket's path has at most 107 bytes; longer scratch paths fall back to the system's.
MAX_SOCKET_PATH = 100


@contextlib.contextmanager
def relay_from_children(scratch: Path | None = None) -> Iterator[None]:
    """Let processes started inside the block report to this process's reporter.

    The socket lives in a private directory under ``scratch`` (the results directory's scratch
    space), removed when the block ends.
    """
    if not hasattr(socket, "AF_UNIX") or RELAY_ENV in os.environ:
        yield
        return
    target = current()
    if scratch is not None and len(str(scratch)) + 40 > MAX_SOCKET_PATH:
        scratch = None
    if scratch is not None:
        scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dpsuite-progress-", dir=scratch) as tmp:
        address = os.path.join(tmp, "relay")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(address)
        sock.settimeout(0.1)
        stop = threading.Event()
        thread = threading.Thread(
            target=_forward, args=(sock, target, stop), name="dpsuite-progress", daemon=True
        )
        thread.start()
        os.environ[RELAY_ENV] = address
        try:
            yield
        finally:
            del os.environ[RELAY_ENV]
            stop.set()
            thread.join(timeout=2)
            sock.close()


def _forward(sock: socket.socket, target: Reporter, stop: threading.Event) -> None:
    """Dispatch relayed events to ``target`` until stopped and drained."""
    while True:
        try:
            payload = sock.recv(65536)
        except TimeoutError:
            if stop.is_set():
                return
            continue
        except OSError:
            return
        try:
            name, args = json.loads(payload)
            if name in RELAYED:
                getattr(target, name)(*args)
        except (ValueError, TypeError, KeyError):
            continue  # a malformed event is dropped, never fatal
