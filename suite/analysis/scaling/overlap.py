"""How much of the all-reduce time DDP hides behind the backward pass: its bucket schedule.

DDP packs gradients into buckets of ``bucket_cap_mb`` MiB in the order the backward pass produces
them (last layers first) and all-reduces a bucket as soon as its last gradient is ready, while the
backward pass goes on (Li et al. 2020, "PyTorch Distributed", sec. 3.2.2-3.2.3). The all-reduces
run one after another on one communication stream. So:

* bucket k is ready when the backward pass has produced the gradient bytes up to its end; the
  model takes gradient bytes to appear evenly over the backward pass;
* its all-reduce starts when it is ready and the previous one is done;
* whatever runs past the end of the backward pass is exposed: at least the whole all-reduce of
  the last bucket, which is ready only when the backward pass ends.

Horovod's tensor fusion (a fusion buffer of 64 MiB, Horovod docs: tensor-fusion) behaves the same
way with its buffer as the bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def bucket_sizes(grad_bytes: float, bucket_bytes: float) -> list[float]:
    """Full buckets in gradient order, the remainder last (as DDP fills them)."""
    if grad_bytes <= 0:
        return []
    full = max(1, math.ceil(grad_bytes / bucket_bytes)) - 1
    return [bucket_bytes] * full + [grad_bytes - full * bucket_bytes]


def exposed_s(
    buckets: list[float], allreduce_s: Callable[[float], float], backward_s: float
) -> tuple[float, float]:
    """(all-reduce time in total, the part of it not hidden by the backward pass)."""
    total = sum(buckets)
    produced, free_at, busy = 0.0, 0.0, 0.0
    for size in buckets:
        produced += size
        ready = backward_s * produced / total
        took = allreduce_s(size)
        free_at = max(ready, free_at) + took
        busy += took
    return busy, max(0.0, free_at - backward_s)
