"""The per-step communication tally and the step-time breakdown drawn from it."""

from __future__ import annotations

import pytest

from suite.sync.counter import CommCounter, union_length
from suite.sync.measure import fill_in


def test_union_length_counts_overlapping_buckets_once():
    assert union_length([]) == 0
    assert union_length([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    assert union_length([(1.0, 2.0), (0.0, 4.0)]) == pytest.approx(4.0)


def test_counter_files_each_step_and_starts_afresh():
    c = CommCounter()
    c.add(100)
    c.add(50, ops=3)
    c.add_interval(0.0, 0.5)
    c.add_blocking(0.25)
    first = c.end_step()
    assert (first.bytes, first.ops, first.seconds) == (150, 4, pytest.approx(0.75))
    assert c.pending_ops == 0 and c.end_step().bytes == 0
    assert c.total_bytes == 150 and c.total_ops == 4


def test_periodic_blocking_exchange_counts_at_its_share_of_the_wall_time():
    # Three cheap steps and one with a 4 s average: half of the wall time is communication.
    steps, blocking = [1.0, 1.0, 1.0, 5.0], [0.0, 0.0, 0.0, 4.0]
    out = fill_in(blocking, blocking, [0.0] * 4, steps)
    assert out["comm_fraction"] == pytest.approx(0.5)
    assert out["exposed_comm_s"] == pytest.approx(0.5)  # half of the 1 s median step
    assert out["compute_time_s"] + out["exposed_comm_s"] == pytest.approx(1.0)
    assert out["comm_time_s"] == pytest.approx(0.5)


def test_overlappable_communication_leaves_exposed_time_to_be_measured():
    out = fill_in([0.4, 0.4], [0.0, 0.0], [0.4, 0.4], [1.0, 1.0])
    assert out == {"comm_time_s": pytest.approx(0.4)}
