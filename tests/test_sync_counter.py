"""The per-step communication tally, and step-time medians over a strategy's period."""

from __future__ import annotations

import pytest

from dpsuite.measure.step_timer import median, windowed
from dpsuite.sync.counter import CommCounter


def test_counter_files_each_step_and_starts_afresh():
    c = CommCounter()
    c.add(100)
    c.add(50, ops=3)
    c.add_blocking(0.25)
    first = c.end_step()
    assert (first.bytes, first.ops, first.blocking_s) == (150, 4, pytest.approx(0.25))
    assert c.pending_ops == 0 and c.end_step().bytes == 0
    assert c.total_bytes == 150 and c.total_ops == 4


def test_a_periodic_exchange_counts_in_windowed_medians():
    # Averaging every 4th step (4 s) on top of 1 s steps: a per-step median would show none of
    # it; the median over whole periods shows 1 s of it per step.
    comm = [0.0, 0.0, 0.0, 4.0] * 5
    assert median(comm) == 0.0
    assert median(windowed(comm, 4)) == pytest.approx(1.0)
    assert windowed([1.0, 2.0, 3.0], 1) == [1.0, 2.0, 3.0]
    assert windowed([1.0, 3.0, 5.0], 2) == [2.0]  # only whole windows


def test_a_step_without_communication_files_zeros():
    c = CommCounter()
    quiet = c.end_step()
    assert (quiet.bytes, quiet.ops, quiet.blocking_s) == (0.0, 0, 0.0)
    c.add_blocking(0.5)
    assert c.end_step().blocking_s == 0.5 and c.end_step().blocking_s == 0.0
    assert [s.ops for s in c.steps] == [0, 0, 0] and len(c.steps) == 3


def test_a_counter_that_files_no_steps_refuses_a_count_and_files_them_at_once():
    c = CommCounter(files_steps=False)  # DDP's built-in all-reduce: every step the same
    with pytest.raises(RuntimeError, match="files none"):
        c.add(100)
    with pytest.raises(RuntimeError, match="files none"):
        c.add_blocking(0.5)
    c.file_quiet_steps(4)
    assert len(c.steps) == 4 and c.total_bytes == 0 and c.total_ops == 0
    c.file_quiet_steps(4)
    assert len(c.steps) == 4, "filed up to a count, not by it"


def test_only_the_strategies_counting_nothing_file_no_steps():
    import torch

    from dpsuite.sync import STRATEGIES

    files = {name: cls.files_traffic for name, cls in STRATEGIES.items()}
    assert {name for name, filed in files.items() if not filed} == {"allreduce", "zero1"}
    allreduce = STRATEGIES["allreduce"]
    assert not allreduce(allreduce.Config(), torch.device("cpu"), 1).counter.files_steps
