"""FSDP's all-gathers and reduce-scatters against the forward and backward passes.

What ``fully_shard`` (FSDP2, torch 2.13) overlaps:

* on CUDA the host runs ahead of the GPU, so each unit's all-gather is issued before the GPU
  reaches the unit (implicit forward prefetch): the all-gathers run one after another from the
  start of the step and a unit computes once its parameters are gathered and the unit before
  it is done. In the backward pass each unit prefetches the next one's all-gather as it starts
  (``_backward_prefetch``), and reduce-scatters its gradients when it ends, on their own
  stream; the root's reduce-scatter comes last, after the whole backward pass. All the
  collectives share one link and run one after another in the order they are issued.
* on CPU (gloo) its streams are no-ops and every collective is issued with ``async_op=False``:
  each blocks the step, none overlaps compute. So does ``overlap=False``.

A unit's share of the forward and backward work is its share of the parameter bytes (the
units' FLOPs are not known to the model): the root, gathered first, is taken to compute first
in the forward pass and last in the backward pass.
"""

from __future__ import annotations

from collections.abc import Callable

from dpsuite.analysis.scaling.strategy import Comm, Unit

Cost = Callable[[float], float]


def serial(units: tuple[Unit, ...], gather_s: Cost, scatter_s: Cost) -> Comm:
    """Every collective waited for where it is issued: all exposed."""
    took = sum(gathers * gather_s(size) + scatter_s(size) for size, gathers in units)
    return Comm(took, took)


def _order(units: tuple[Unit, ...]) -> list[Unit]:
    """Forward order: the root (last in ``units``) first, then the units as wrapped."""
    return [units[-1], *units[:-1]] if units else []


def _forward(order: list[Unit], gather_s: Cost, forward_s: float, total: float) -> tuple:
    """(end of the forward pass, when the link is free): all-gathers back to back from 0."""
    link = done = 0.0
    for size, _ in order:
        link += gather_s(size)
        done = max(done, link) + forward_s * size / total
    return done, link


def overlapped(
    units: tuple[Unit, ...],
    gather_s: Cost,
    scatter_s: Cost,
    forward_s: float,
    backward_s: float,
) -> Comm:
    """The schedule of the module docstring: total collective time, and how much longer the
    forward and backward passes take than their compute."""
    order = _order(units)
    total = sum(size for size, _ in order) or 1.0
    t, link = _forward(order, gather_s, forward_s, total)
    comm = sum(gathers * gather_s(size) + scatter_s(size) for size, gathers in order)
    backward = list(reversed(order))  # the root last
    gathered: dict[int, float] = {}  # unit -> when its backward all-gather ends
    for i, (size, gathers) in enumerate(backward):
        if gathers > 1:
            if i not in gathered:  # the first unit: nothing before it prefetched it
                link = max(link, t) + gather_s(size)
                gathered[i] = link
            t = max(t, gathered[i])
        if i + 1 < len(backward) and backward[i + 1][1] > 1:  # prefetch the next as it starts
            link = max(link, t) + gather_s(backward[i + 1][0])
            gathered[i + 1] = link
        t += backward_s * size / total
        link = max(link, t) + scatter_s(size)  # its reduce-scatter, once its backward ends
    end = max(t, link)
    return Comm(comm, max(0.0, end - forward_s - backward_s))
