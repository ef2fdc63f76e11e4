"""dpsuite.engine.train and dpsuite.measure.probes: one step, and who is called when."""

from __future__ import annotations

import math

import pytest
import torch

from dpsuite import progress
from dpsuite.conf.compose import compose_config
from dpsuite.conf.run_spec import resolve
from dpsuite.engine.train import check, evaluate_and_record, setup, train_step
from dpsuite.measure.probes import Probe, Probes
from dpsuite.runtime.ranks import Ranks
from tests.conftest import SMALL


class Recorder(Probe):
    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def on_step_start(self, step: int) -> None:
        self.calls.append((self.name, "start", step))

    def on_backward_end(self, step: int) -> None:
        self.calls.append((self.name, "backward", step))

    def on_step_end(self, step: int) -> None:
        self.calls.append((self.name, "end", step))


class EvalOnly(Probe):
    def on_eval(self, row: dict) -> None:
        row["extra"] = 1.0


def test_probes_are_called_in_order_and_the_first_brackets_the_others():
    calls: list = []
    probes = Probes([Recorder(calls, "timer"), Recorder(calls, "other"), EvalOnly()])
    probes.on_step_start(3)
    probes.on_backward_end(3)
    probes.on_step_end(3)
    assert calls == [
        ("other", "start", 3),
        ("timer", "start", 3),  # starts last...
        ("timer", "backward", 3),
        ("other", "backward", 3),
        ("timer", "end", 3),  # ...and stops first
        ("other", "end", 3),
    ]
    assert len(probes._start) == 2, "a probe that does not watch steps is not called on them"
    row: dict = {}
    probes.on_eval(row)
    assert row == {"extra": 1.0}


class EveryThird(Recorder):
    """Samples steps 2, 5, 8, ... up to ``until``."""

    def __init__(self, calls: list, name: str, until: int = 1000) -> None:
        super().__init__(calls, name)
        self.until = until
        self.asked: list[int] = []

    def next_due(self, step: int) -> int | None:
        self.asked.append(step)
        due = step + (2 - step) % 3
        return due if due < self.until else None


def test_a_sampling_probe_is_called_at_its_steps_only_and_asked_only_then():
    calls: list = []
    sampler, first = EveryThird(calls, "sampler"), EveryThird(calls, "first", until=6)
    probes = Probes([Recorder(calls, "timer"), sampler, first])
    for step in range(12):
        probes.on_step_start(step)
        probes.on_backward_end(step)
        probes.on_step_end(step)
    steps_of = {n: sorted({s for who, _, s in calls if who == n}) for n in ("timer", "sampler")}
    assert steps_of["timer"] == list(range(12))
    assert steps_of["sampler"] == [2, 5, 8, 11]
    assert sorted({s for who, _, s in calls if who == "first"}) == [2, 5]
    # Asked where a probe was due and at the step after: not at every step.
    assert sampler.asked == [0, 2, 3, 5, 6, 8, 9, 11]
    assert first.asked == [0, 2, 3, 5, 6], "due no more: never asked again"
    at_5 = [(who, hook) for who, hook, s in calls if s == 5]
    assert at_5 == [
        ("first", "start"),
        ("sampler", "start"),
        ("timer", "start"),  # the first probe still brackets the others
        ("timer", "backward"),
        ("sampler", "backward"),
        ("first", "backward"),
        ("timer", "end"),
        ("sampler", "end"),
        ("first", "end"),
    ]


@pytest.mark.parametrize(
    ("name", "guess"),
    [
        ("evaluation", "on_eval"),
        ("step_end", "on_step_end"),
        ("on_evall", "on_eval"),
        ("on_evalution", "on_eval"),
        ("after_backward", "on_backward_end"),
    ],
)
def test_a_probe_that_defines_a_hook_the_loop_never_calls_is_refused(name, guess):
    with pytest.raises(
        TypeError, match=rf"Wrong\.{name} is not a probe hook \(did you mean {guess}\?\)"
    ):
        type("Wrong", (Probe,), {name: lambda self, *args: None})


def test_a_probe_may_have_methods_of_its_own():
    class Own(Probe):
        def per_step(self) -> dict:
            return {}

    assert Probes([Own()]).metrics() == {}


def test_steps_csv_columns_of_every_probe_join_by_step():
    class Times(Probe):
        def step_columns(self) -> dict:
            return {7: {"step_time_s": 0.5}, 5: {"step_time_s": 0.25}}

    class Comm(Probe):
        def step_columns(self) -> dict:
            return {5: {"comm_s": 0.125}}

    assert Probes([Times(), Comm()]).step_columns() == {
        5: {"step_time_s": 0.25, "comm_s": 0.125},
        7: {"step_time_s": 0.5},
    }


def test_one_train_step_moves_the_model_and_is_watched(tmp_path):
    spec = resolve(compose_config([*SMALL, "train.max_steps=3", f"results_dir={tmp_path}"]))
    run = setup(spec, Ranks(0, 1, 0, 1), torch.device("cpu"), writer=None)
    calls: list = []
    run.probes = Probes([*run.probes.probes, Recorder(calls, "watch")])
    before = [p.detach().clone() for p in run.replicas.model.parameters()]
    train_step(run, 0, run.replicas.batches())
    assert [c[1] for c in calls] == ["start", "backward", "end"]
    after = list(run.replicas.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert math.isfinite(check(run, 1)) and run.optimizer.param_groups[0]["lr"] == 0.1
    assert evaluate_and_record(run, 1, 2.0) and run.log[-1]["step"] == 1


def test_parameter_sizes_are_finite_exactly_when_every_parameter_is():
    from dpsuite.engine.train import exact_parameter_sum, parameter_sizes

    def finite(values: torch.Tensor) -> bool:
        return bool(torch.isfinite(values).all())

    big = [torch.full((4,), 3e38), torch.ones(3)]  # finite, but their float32 norm overflows
    assert not finite(parameter_sizes(big))
    assert math.isfinite(float(exact_parameter_sum(big)))  # what the check then decides on
    for bad in (float("inf"), float("nan")):
        params = [torch.ones(3), torch.tensor([1.0, bad])]
        assert not finite(parameter_sizes(params))
        assert not math.isfinite(float(exact_parameter_sum(params)))
    half = [torch.full((100,), 6e4, dtype=torch.float16)]  # a norm past float16's largest
    assert parameter_sizes(half).tolist() == [pytest.approx(6e5)]  # taken in float32
    mixed = [torch.ones(2), torch.ones(2, dtype=torch.float64)]
    sizes = parameter_sizes(mixed)
    assert sizes.tolist() == [4.0] and sizes.dtype == torch.float64


def test_a_check_on_overflowing_but_finite_parameters_goes_on(monkeypatch):
    """Ranks with the same parameters decide from them (here one process posing as a rank)."""
    from dpsuite.engine import train

    spec = resolve(compose_config([*SMALL, "workers=1"]))
    run = setup(spec, Ranks(0, 1, 0, 1), torch.device("cpu"), writer=None)
    monkeypatch.setattr(train.distributed, "active", lambda: True)
    train_step(run, 0, run.replicas.batches())
    assert run.strategy.same_parameters and check(run, 1)
    with torch.no_grad():
        run.shared_params[0].fill_(3e38)  # float32 norms overflow; every value is finite
    assert check(run, 1)
    with torch.no_grad():
        run.shared_params[-1].view(-1)[0] = float("nan")
    assert not check(run, 2)


class ShowsEveryLoss(progress.Reporter):
    def __init__(self, shows: bool) -> None:
        self.shows, self.shown = shows, []

    def wants_step_loss(self) -> bool:
        return self.shows

    def run_step(self, step: int, train_loss: float) -> None:
        self.shown.append((step, train_loss))


@pytest.mark.parametrize("shows", [True, False])
def test_a_check_reads_the_loss_only_where_the_progress_shows_it(monkeypatch, shows):
    """The loss a check shows is this rank's mean since the last check; a check that shows
    nothing calls nothing, and the window's mean at the evaluation is the same either way."""
    from dpsuite.engine import train

    spec = resolve(compose_config([*SMALL, "workers=1"]))
    run = setup(spec, Ranks(0, 1, 0, 1), torch.device("cpu"), writer=None)
    run.reporter = ShowsEveryLoss(shows)
    monkeypatch.setattr(train.distributed, "active", lambda: True)  # the shared-parameter check
    batches = run.replicas.batches()
    losses = []
    for step in range(3):
        train_step(run, step, batches)
        losses.append(run.losses.pending[-1].item())
    assert check(run, 3)
    mean = sum(losses) / 3
    assert run.reporter.shown == ([(3, pytest.approx(mean))] if shows else [])
    monkeypatch.setattr(train.distributed, "all_reduce_sum", lambda values, device: values)
    assert run.losses.take_window() == pytest.approx(mean)
