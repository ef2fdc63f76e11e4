"""Per-step synchronisation that grows with the collective count and N, fitted to measurements.

What a measured step at N workers loses beyond the model's own terms (compute, the exposed
all-reduce, NCCL's SMs, the wait for the slowest rank) is taken as

    sync(N) = fixed + scale * sum over the step's collectives of latency(bucket, N)   (N > 1)

``latency`` is the latency part of the all-reduce the library picks for that bucket
(``allreduce_cost.latency_s``): for NCCL's ring ``baseLat + 2(N-1)`` hops, for its tree
``baseLat + 2((g-1) + log2 m)`` hops, gloo's ring ``2(N-1) alpha``: so the term grows with the
number of buckets and, as NCCL's tuning model says, linearly (ring) or logarithmically (tree
across nodes) with N. ``fixed`` (a per-step cost of synchronising at all: DDP's bookkeeping,
the last bucket's wait) and ``scale`` (how many times the modelled latency a collective really
costs) are fitted, both >= 0, by least squares to the loss at every measured worker count
above one. With one measured count the two cannot be told apart and the whole loss is taken as
``fixed`` (the constant carried overhead of ``--measured-node-efficiency``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dpsuite.analysis.scaling import allreduce_cost, strategy


@dataclass(frozen=True)
class SyncCost:
    """The fitted term: ``fixed_s`` per step and ``scale`` x the collectives' latency, and the
    worker counts it was fitted on."""

    fixed_s: float = 0.0
    scale: float = 0.0
    fitted_on: tuple[int, ...] = ()

    def seconds(self, n: int, collective_latency_s: float) -> float:
        if n <= 1 or not self.fitted_on:
            return 0.0
        return self.fixed_s + self.scale * collective_latency_s


def collective_latency_s(model, n: int) -> float:  # noqa: ANN001 - a ScalingModel
    """The latency part of every collective of one step at ``n`` workers, summed: DDP's
    all-reduces and the sharded strategies' all-gathers, reduce-scatters and broadcasts."""
    allreduces = sum(
        allreduce_cost.latency_s(model.topology, size, n, model.library)
        for size, _ in model.buckets()
    )
    return allreduces + strategy.latencies_s(
        model.strategy, model.topology, model.tensor_bytes, n, model.library
    )


def _nonnegative_lstsq(design: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) >= 0 minimising |design @ (a, b) - y|^2: the unconstrained fit where it is
    >= 0 and determined, else the better of the fits with one of them 0."""
    if len(y) >= 2 and np.linalg.matrix_rank(design) == 2:
        (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
        if a >= 0 and b >= 0:
            return float(a), float(b)
    candidates = [(0.0, 0.0)]
    for column in (0, 1):
        x = design[:, column]
        value = max(0.0, float(x @ y / (x @ x))) if (x @ x) > 0 else 0.0
        candidates.append((value, 0.0) if column == 0 else (0.0, value))
    return min(candidates, key=lambda ab: float(((design @ np.array(ab) - y) ** 2).sum()))


def equations(
    plain_s: dict[int, float],
    latencies: dict[int, float],
    efficiencies: dict[int, float],
    baseline: int,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The counts the term is fitted at, and its linear equations there: with T(n) = plain(n) +
    [n > 1](fixed + scale latency(n)), each T(k) = T(baseline) / e(k) is one row of
    ``design @ (fixed, scale) = target``."""
    counts = sorted(n for n in efficiencies if n > 1 and n != baseline)
    on_base = 1.0 if baseline > 1 else 0.0
    rows, y = [], []
    for k in counts:
        e = efficiencies[k]
        rows.append([1.0 - on_base / e, latencies[k] - on_base * latencies[baseline] / e])
        y.append(plain_s[baseline] / e - plain_s[k])
    return counts, np.array(rows).reshape(len(counts), 2), np.array(y)


def fit_sync(
    plain_s: dict[int, float],
    latencies: dict[int, float],
    efficiencies: dict[int, float],
    baseline: int,
) -> SyncCost:
    """The term fitted to measured ``efficiencies`` (count -> efficiency against ``baseline``
    workers), given the model's step without it (``plain_s``) and the collectives' latency at
    each count and at the baseline (``equations``); one count: fixed alone."""
    counts, design, target = equations(plain_s, latencies, efficiencies, baseline)
    if not counts:
        return SyncCost()
    if len(counts) == 1:
        x = design[:, 0]
        fixed = max(0.0, float(x @ target / (x @ x))) if (x @ x) > 0 else 0.0
        return SyncCost(fixed, 0.0, tuple(counts))
    fixed, scale = _nonnegative_lstsq(design, target)
    return SyncCost(fixed, scale, tuple(counts))


def with_sync(model, efficiencies: dict[int, float], baseline: int, batch: int):  # noqa: ANN001, ANN201
    """``model`` (a ScalingModel) with the term fitted to measured efficiencies (worker count
    -> efficiency against ``baseline`` workers at the per-worker ``batch``)."""
    plain = replace(model, overheads=replace(model.overheads, sync=SyncCost()))
    counts = {*efficiencies, baseline}
    sync = fit_sync(
        {n: plain.step_s(n, batch) for n in counts},
        {n: collective_latency_s(plain, n) for n in counts},
        efficiencies,
        baseline,
    )
    if not sync.fitted_on:
        return plain
    measured = (*[m for m in plain.measured if m != "synchronisation"], "synchronisation")
    return replace(plain, overheads=replace(plain.overheads, sync=sync), measured=measured)
