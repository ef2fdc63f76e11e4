"""Measurement as probes: objects the training loop calls at fixed points of every step.

The loop knows nothing about what is measured. It calls, in this order::

    probes.step_start(step)      # before the step's forward pass
    probes.after_backward(step)  # the averaged gradient is in .grad, the optimizer has not run
    probes.step_end(step)        # after the optimizer step (and any parameter exchange)
    probes.check()               # at each loss check: the ranks meet, small collectives are ok
    probes.evaluation(row)       # at each evaluation: add columns to the epochs.csv row
    probes.metrics()             # at the end, on every rank: run.json metrics (may gather)

A probe overrides only the calls it needs; the others are not called at all, and a probe that is
not sampling a step returns at once: the unmeasured step costs a few attribute lookups.
"""

from __future__ import annotations

from typing import Any

HOOKS = ("on_step_start", "after_backward", "on_step_end", "on_check", "on_eval")


class Probe:
    """A measurement riding along the training loop."""

    def on_step_start(self, step: int) -> None:
        """Before the step's forward pass."""

    def after_backward(self, step: int) -> None:
        """After backward and gradient averaging, before the optimizer step."""

    def on_step_end(self, step: int) -> None:
        """After the optimizer step."""

    def on_check(self) -> None:
        """At a loss check: every rank is here, so cheap collectives are allowed."""

    def on_eval(self, row: dict[str, Any]) -> None:
        """At an evaluation: add this probe's columns to ``row``."""

    def metrics(self) -> dict[str, Any]:
        """run.json metrics, at the end of the run; called on every rank (it may gather)."""
        return {}


def _overrides(probe: Probe, hook: str) -> bool:
    return getattr(type(probe), hook) is not getattr(Probe, hook)


class Probes:
    """The run's probes, called in order at the end of a step and in reverse order at its start,
    so that the first probe (the step timer) brackets all the others' work."""

    def __init__(self, probes: list[Probe]) -> None:
        self.probes = probes
        calls = {h: [getattr(p, h) for p in probes if _overrides(p, h)] for h in HOOKS}
        self._start = calls["on_step_start"][::-1]
        self._backward = calls["after_backward"]
        self._end = calls["on_step_end"]
        self._check = calls["on_check"]
        self._eval = calls["on_eval"]

    def step_start(self, step: int) -> None:
        for call in self._start:
            call(step)

    def after_backward(self, step: int) -> None:
        for call in self._backward:
            call(step)

    def step_end(self, step: int) -> None:
        for call in self._end:
            call(step)

    def check(self) -> None:
        for call in self._check:
            call()

    def evaluation(self, row: dict[str, Any]) -> None:
        for call in self._eval:
            call(row)

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for probe in self.probes:
            out.update(probe.metrics())
        return out
