"""Measurement as probes: objects the training loop calls at fixed points of a run (the hooks,
all named `on_*`).

The loop knows nothing about what is measured. It calls ``Probes`` by the hooks' own names,
in this order::

    probes.on_calibration_start()       # before the timed steps without gradient sync
    probes.on_calibration_end(times)    # after them: each calibration step's duration
    probes.on_step_start(step)          # as the step starts: before it takes its batch
    probes.on_batch_ready(step)         # the batch is here (the wait for data is over)
    probes.on_backward_end(step)        # the averaged gradient is in .grad, no optimizer step yet
    probes.on_step_end(step)            # after the optimizer step (and any parameter exchange)
    probes.on_check()                   # at each divergence check (all ranks, no meeting)
    probes.on_eval(row)                 # at each evaluation: add columns to the epochs.csv row
    probes.metrics()                    # at the end, on every rank: run.json metrics (may gather)
    probes.step_columns()               # then: steps.csv columns by step (may gather)
    probes.rank_steps()                 # then: steps_by_rank.csv rows (may gather)

A probe overrides only the hooks it needs; the others are not called at all. A probe that
measures some steps only (every n-th, or the first few) says which with ``next_due``: on the
steps between, its step hooks are not called either, so an unmeasured step costs it nothing
(on a millisecond step every Python call shows). A probe class that defines a method named like
a hook but not one (``evaluation``, ``on_step``) is refused when it is defined: it would never
be called.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dpsuite.errors import did_you_mean

# The hooks of a training step: called on a probe only at the steps it is due (``next_due``).
STEP_HOOKS = ("on_step_start", "on_batch_ready", "on_backward_end", "on_step_end")
# Called at the loop's points, only on the probes that override them.
HOOKS = (
    "on_calibration_start",
    "on_calibration_end",
    "on_step_start",
    "on_batch_ready",
    "on_backward_end",
    "on_step_end",
    "on_check",
    "on_eval",
)
# Called on every probe at the end of the run (every rank: they may gather).
OUTPUTS = ("metrics", "step_columns", "rank_steps")
# A method named with a hook's prefix, or with one of the loop's points, must be a hook (the
# rest of a probe's methods are its own).
_HOOK_PREFIXES = ("on_", "after_", "before_")
_LOOP_POINTS = {
    "step_start": "on_step_start",
    "step_end": "on_step_end",
    "check": "on_check",
    "evaluation": "on_eval",
    "after_backward": "on_backward_end",
    "step_rows": "step_columns",
}


class Probe:
    """A measurement riding along the training loop."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if callable(value) and _looks_like_a_hook(name) and name not in HOOKS + OUTPUTS:
                hint = did_you_mean(name, HOOKS + OUTPUTS, known=_LOOP_POINTS)
                raise TypeError(
                    f"{cls.__name__}.{name} is not a probe hook{hint}: the loop never calls it; "
                    f"the hooks are {', '.join(HOOKS + OUTPUTS)}"
                )

    def next_due(self, step: int) -> int | None:
        """The first step from ``step`` on at which this probe's step hooks are to be called
        (None: no more): every step unless a probe says otherwise. Asked at a step's start,
        and only at the steps the probes' answers point to."""
        return step

    def on_calibration_start(self) -> None:
        """Before the calibration's steps without gradient sync."""

    def on_calibration_end(self, times: list[float]) -> None:
        """After them: the duration of each timed calibration step on this rank."""

    def on_step_start(self, step: int) -> None:
        """As the step starts, before it takes its batch."""

    def on_batch_ready(self, step: int) -> None:
        """The step's batch is here: before its forward pass."""

    def on_backward_end(self, step: int) -> None:
        """After backward and gradient averaging, before the optimizer step."""

    def on_step_end(self, step: int) -> None:
        """After the optimizer step."""

    def on_check(self) -> None:
        """At a divergence check (every ``train.check_every`` steps, on every rank alike): a
        collective here is allowed but costs every such step; the suite's probes use none."""

    def on_eval(self, row: dict[str, Any]) -> None:
        """At an evaluation: add this probe's columns to ``row``."""

    def metrics(self) -> dict[str, Any]:
        """run.json metrics, at the end of the run; called on every rank (it may gather)."""
        return {}

    def step_columns(self) -> dict[int, dict[str, Any]]:
        """steps.csv columns by timed step, after ``metrics``; on every rank (it may gather)."""
        return {}

    def rank_steps(self) -> list[dict[str, Any]]:
        """steps_by_rank.csv rows (one per step and rank), last; on every rank (may gather)."""
        return []


def _looks_like_a_hook(name: str) -> bool:
    return name.startswith(_HOOK_PREFIXES) or name in _LOOP_POINTS


def _overrides(probe: Probe, hook: str) -> bool:
    return getattr(type(probe), hook) is not getattr(Probe, hook)


def caller(calls: list[Callable[[int], None]]) -> Callable[[int], None]:
    """One callable making ``calls`` in order: the only call itself where there is one (a
    Python call less on every step: on a millisecond step each one shows)."""
    if len(calls) == 1:
        return calls[0]

    def each(step: int) -> None:
        for call in calls:
            call(step)

    return each


class Probes:
    """The run's probes, called in order at the end of a step and in reverse order at its start,
    so that the first probe (the step timer) brackets all the others' work.

    The calls of a step's hooks are chosen at its start: those of the probes watching every
    step, and of the sampling probes due then. They are chosen anew only at the next step a
    sampling probe is due (and at the step after it), so that a step none is due at costs one
    comparison more than one without sampling probes.
    """

    def __init__(self, probes: list[Probe]) -> None:
        self.probes = probes
        calls = {h: [getattr(p, h) for p in probes if _overrides(p, h)] for h in HOOKS}
        self._calibration_start = calls["on_calibration_start"]
        self._calibration_end = calls["on_calibration_end"]
        self._check = calls["on_check"]
        self._eval = calls["on_eval"]
        watching = [i for i, p in enumerate(probes) if any(_overrides(p, h) for h in STEP_HOOKS)]
        # Where each sampling probe (by its place in ``probes``) is next due; the others
        # watch every step.
        self._sampling = [i for i in watching if _overrides(probes[i], "next_due")]
        self._every_step = [i for i in watching if i not in self._sampling]
        self._wake: float = 0  # the next step at which the step hooks' calls are chosen
        # The step hooks' calls by the sampling probes due: a few combinations, each built once.
        self._calls: dict[tuple[int, ...], tuple[list[Callable], ...]] = {}
        self._use(())

    def _use(self, due: tuple[int, ...]) -> None:
        """The step hooks' calls: of the probes watching every step and of those ``due``."""
        calls = self._calls.get(due)
        if calls is None:
            chosen = [p for i, p in enumerate(self.probes) if i in self._every_step or i in due]
            by_hook = [[getattr(p, h) for p in chosen if _overrides(p, h)] for h in STEP_HOOKS]
            by_hook[0].reverse()  # on_step_start: the first probe starts last
            calls = self._calls[due] = (*by_hook, *(caller(c) for c in by_hook))
        self._start, self._batch_ready, self._backward, self._end = calls[:4]
        # The hooks after the step's start are the callers themselves (instance attributes).
        self._call_start, self.on_batch_ready, self.on_backward_end, self.on_step_end = calls[4:]

    def _plan(self, step: int) -> None:
        """Choose this step's calls: the sampling probes due at ``step``, and when to choose
        again (the next step; or, where none is due, the first step one is)."""
        due_at = [self.probes[i].next_due(step) for i in self._sampling]
        due = tuple(i for i, at in zip(self._sampling, due_at, strict=True) if at == step)
        self._use(due)
        later = [at for at in due_at if at is not None]
        self._wake = step + 1 if due else min(later, default=math.inf)
        if len(later) < len(due_at):  # due no more: not asked again
            self._sampling = [
                i for i, at in zip(self._sampling, due_at, strict=True) if at is not None
            ]

    def on_calibration_start(self) -> None:
        for call in self._calibration_start:
            call()

    def on_calibration_end(self, times: list[float]) -> None:
        for call in self._calibration_end:
            call(times)

    def on_step_start(self, step: int) -> None:
        if step >= self._wake:
            self._plan(step)
        self._call_start(step)

    # Set per step by ``_use``: each a caller of the due probes' hooks (see ``caller``).
    on_batch_ready: Callable[[int], None]
    on_backward_end: Callable[[int], None]
    on_step_end: Callable[[int], None]

    def on_check(self) -> None:
        for call in self._check:
            call()

    def on_eval(self, row: dict[str, Any]) -> None:
        for call in self._eval:
            call(row)

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for probe in self.probes:
            out.update(probe.metrics())
        return out

    def step_columns(self) -> dict[int, dict[str, Any]]:
        """Every probe's steps.csv columns, joined by step (in step order)."""
        rows: dict[int, dict[str, Any]] = {}
        for probe in self.probes:
            for step, columns in probe.step_columns().items():
                rows.setdefault(step, {}).update(columns)
        return dict(sorted(rows.items()))

    def rank_steps(self) -> list[dict[str, Any]]:
        """Every probe's steps_by_rank.csv rows."""
        return [row for probe in self.probes for row in probe.rank_steps()]
