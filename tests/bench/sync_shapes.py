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

A change lands in the model only by the rule in docs/scaling-model.md ("A second held-out
set"), not by its score here on the rows it was found on.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

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


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "model": as_it_is,
    "ring-latency": ring_latency,
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
