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

A probe overrides only the hooks it needs; the others are not called at all, and a probe that is
not sampling a step returns at once: the unmeasured step costs a few attribute lookups. A probe
class that defines a method named like a hook but not one (``evaluation``, ``on_step``) is refused
when it is defined: it would never be called.
"""

from __future__ import annotations

from typing import Any

from dpsuite.errors import did_you_mean

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


class Probes:
    """The run's probes, called in order at the end of a step and in reverse order at its start,
    so that the first probe (the step timer) brackets all the others' work."""

    def __init__(self, probes: list[Probe]) -> None:
        self.probes = probes
        calls = {h: [getattr(p, h) for p in probes if _overrides(p, h)] for h in HOOKS}
        self._calibration_start = calls["on_calibration_start"]
        self._calibration_end = calls["on_calibration_end"]
        self._start = calls["on_step_start"][::-1]
        self._batch_ready = calls["on_batch_ready"]
        self._backward = calls["on_backward_end"]
        self._end = calls["on_step_end"]
        self._check = calls["on_check"]
        self._eval = calls["on_eval"]

    def on_calibration_start(self) -> None:
        for call in self._calibration_start:
            call()

    def on_calibration_end(self, times: list[float]) -> None:
        for call in self._calibration_end:
            call(times)

    def on_step_start(self, step: int) -> None:
        for call in self._start:
            call(step)

    def on_batch_ready(self, step: int) -> None:
        for call in self._batch_ready:
            call(step)

    def on_backward_end(self, step: int) -> None:
        for call in self._backward:
            call(step)

    def on_step_end(self, step: int) -> None:
        for call in self._end:
            call(step)

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
