"""On CUDA the step timer records events and never waits for the device while stepping."""

from __future__ import annotations

import pytest
import torch

from dpsuite.measure.step_timer import StepTimer


class FakeEvent:
    """A CUDA event stand-in: completes when the test says so; counts the waits."""

    made: list[FakeEvent] = []
    waits = 0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at: float | None = None
        self.done = False
        FakeEvent.made.append(self)

    def record(self) -> None:
        self.at = float(len(FakeEvent.made))  # ms: one per event made so far

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        FakeEvent.waits += 1
        self.done = True

    def elapsed_time(self, end: FakeEvent) -> float:
        assert end.done, "elapsed_time of an event not completed"  # (self precedes end)
        return end.at - self.at


@pytest.fixture
def fake_cuda(monkeypatch):
    FakeEvent.made, FakeEvent.waits = [], 0
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)

    def no_sync(*args, **kwargs):
        raise AssertionError("the step timer synchronized the device")

    monkeypatch.setattr(torch.cuda, "synchronize", no_sync)
    return FakeEvent


def test_steps_are_timed_by_events_without_waiting(fake_cuda):
    timer = StepTimer(torch.device("cuda", 0), warmup=1)
    for step in range(4):
        timer.start()
        assert timer.stop(step) is None
    assert fake_cuda.waits == 0  # nothing completed: nothing waited for
    assert timer.steps == [1, 2, 3]
    assert timer.durations == [0.001, 0.001, 0.001]  # read (and waited for) only now


def test_completed_events_are_read_as_the_steps_go(fake_cuda):
    timer = StepTimer(torch.device("cuda", 0), warmup=0)
    timer.start()
    timer.stop(0)
    for event in fake_cuda.made:
        event.done = True  # the device has caught up
    timer.start()
    timer.stop(1)  # reads step 0's pair (completed), leaves step 1's
    assert timer._durations == [0.001] and len(timer._open) == 1
    assert timer.durations == [0.001, 0.001]


def test_cpu_steps_are_wall_clock():
    timer = StepTimer(torch.device("cpu"), warmup=0)
    timer.start()
    elapsed = timer.stop(0)
    assert elapsed is not None and elapsed >= 0 and timer.durations == [elapsed]
