"""The leave-last-out skill of the scaling model and of changes to its synchronisation term.

    python tests/bench/sync_shapes.py [--published FILE] [--family TEXT ...]

Scores, per family and for all the rows, the model as it is (``model``) and each change below,
applied to every row the same way and fitted on the smaller counts only (as
``dpsuite predict --published``'s leave-last-out): mean |error| in efficiency points beside the
two trivial forecasts', and the model's over "stays what it was"'s. ``--family`` keeps the
families whose name contains one of the texts.

Changes:
* ``ring-latency``: the term's latency is NCCL's ring's, whatever algorithm its tuner picks for
  the bucket (the model takes the latency of the algorithm the tuner picks).
* ``one-count-grows``: fitted to one count above the baseline, the loss is taken as the
  latency part (it grows with N) instead of the fixed part.
* ``slowest-of-n``: the term's shape is the wait for the slowest of N ranks, E[max of N standard
  normal draws], instead of the collectives' latency; one count: the loss taken as that.
* ``slowest-of-n-two-counts``: the same shape, the model's fixed part where one count is given.

A change lands in the model only by the rule in docs/scaling-model.md ("A second held-out
set"), not by its score here on the rows it was found on.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script: the suite from this checkout


@contextlib.contextmanager
def as_it_is() -> Iterator[None]:
    yield


@contextlib.contextmanager
def ring_latency() -> Iterator[None]:
    """NCCL's ring latency for every bucket, whatever its tuner picks."""
    from dpsuite.analysis.scaling import allreduce_cost

    picked = allreduce_cost.latency_s

    def ring(top, size, n, library):  # noqa: ANN001, ANN202 - latency_s's signature
        if n > 1 and library.backend == "nccl":
            return allreduce_cost.nccl_latency_s(top, size, n, "ring", library.nccl_ll128)
        return picked(top, size, n, library)

    allreduce_cost.latency_s = ring
    try:
        yield
    finally:
        allreduce_cost.latency_s = picked


def _grows_from_one_count(fit):  # noqa: ANN001, ANN202 - sync_cost.fit_sync
    """``fit``, but from one count above the baseline the loss is the latency part."""
    from dpsuite.analysis.scaling.sync_cost import SyncCost, equations

    def fitted(plain_s, latencies, efficiencies, baseline):  # noqa: ANN001, ANN202
        counts, design, target = equations(plain_s, latencies, efficiencies, baseline)
        if len(counts) != 1 or design[0, 1] <= 0:
            return fit(plain_s, latencies, efficiencies, baseline)
        return SyncCost(0.0, max(0.0, float(target[0] / design[0, 1])), tuple(counts))

    return fitted


@contextlib.contextmanager
def one_count_grows() -> Iterator[None]:
    from dpsuite.analysis.scaling import sync_cost

    fit = sync_cost.fit_sync
    sync_cost.fit_sync = _grows_from_one_count(fit)
    try:
        yield
    finally:
        sync_cost.fit_sync = fit


def expected_max_of_normals(n: int) -> float:
    """E[max of n standard normal draws] (0 for one), by quadrature on a fine grid."""
    if n <= 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 200_001)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = np.cumsum(pdf) * (x[1] - x[0])
    return float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))


@contextlib.contextmanager
def slowest_of_n(one_count: bool = True) -> Iterator[None]:
    from dpsuite.analysis.scaling import sync_cost

    fit, latency = sync_cost.fit_sync, sync_cost.collective_latency_s
    sync_cost.collective_latency_s = lambda model, n: 1e-3 * expected_max_of_normals(n)
    if one_count:
        sync_cost.fit_sync = _grows_from_one_count(fit)
    try:
        yield
    finally:
        sync_cost.fit_sync, sync_cost.collective_latency_s = fit, latency


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "model": as_it_is,
    "ring-latency": ring_latency,
    "one-count-grows": one_count_grows,
    "slowest-of-n": slowest_of_n,
    "slowest-of-n-two-counts": lambda: slowest_of_n(one_count=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--published", type=Path, default=None)
    parser.add_argument("--family", nargs="*", default=[])
    args = parser.parse_args()
    from dpsuite.analysis.scaling import leave_last_out, skill
    from dpsuite.analysis.scaling.published import PUBLISHED

    for name, variant in VARIANTS.items():
        with variant():
            table = leave_last_out.leave_last_out_table(args.published or PUBLISHED)
        if args.family:
            keep = table["family"].apply(lambda f: any(t in f for t in args.family))
            table = table[keep]
        print(f"\n## {name}\n")
        print(leave_last_out.format_leave_last_out(skill.skill_by_family(table)))


if __name__ == "__main__":
    main()
