"""How much of the all-reduce time DDP hides behind the backward pass: its bucket schedule.

DDP packs gradients into buckets of ``bucket_cap_mb`` MiB in the order the backward pass produces
them (last layers first) and all-reduces a bucket as soon as its last gradient is ready, while the
backward pass goes on (Li et al. 2020, "PyTorch Distributed", sec. 3.2.2-3.2.3). The all-reduces
run one after another on one communication stream. So:

* the buckets are DDP's own (``ddp_buckets``): the model's parameters in the order the backward
  pass produces their gradients (reverse registration order, the order DDP rebuilds its buckets
  in after the first step), a bucket closed once it holds ``bucket_cap_mb`` (the first one
  1 MiB, ``dist._DEFAULT_FIRST_BUCKET_BYTES``), never a tensor split: one large tensor (VGG-16's
  fc6, a tied embedding) is a bucket of its own size. Without a parameter list the gradient is
  cut into equal buckets (``bucket_sizes``);
* bucket k is ready when the backward pass has done the work of its tensors' layers and of all
  before them: their share of the backward FLOPs where known (a VGG's fully connected layers
  hold most of the bytes and little of the work, so their gradients are ready early), else
  their share of the gradient bytes;
* its all-reduce starts when it is ready and the previous one is done;
* whatever runs past the end of the backward pass is exposed: at least the whole all-reduce of
  the last bucket, which is ready only when the backward pass ends.

Horovod's tensor fusion (a fusion buffer of 64 MiB, Horovod docs: tensor-fusion) behaves the same
way with its buffer as the bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable

Bucket = tuple[float, float]  # (bytes, fraction of the backward pass done when it is ready)


def bucket_sizes(grad_bytes: float, bucket_bytes: float) -> list[float]:
    """Full buckets in gradient order, the remainder last (as DDP fills them)."""
    if grad_bytes <= 0:
        return []
    full = max(1, math.ceil(grad_bytes / bucket_bytes)) - 1
    return [bucket_bytes] * full + [grad_bytes - full * bucket_bytes]


def even_buckets(grad_bytes: float, bucket_bytes: float) -> list[Bucket]:
    """Equal buckets of a gradient whose bytes appear evenly over the backward pass."""
    sizes = bucket_sizes(grad_bytes, bucket_bytes)
    total, done, out = sum(sizes), 0.0, []
    for size in sizes:
        done += size
        out.append((size, done / total))
    return out


FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def ddp_buckets(
    tensor_bytes: list[float],
    bucket_bytes: float,
    first_bytes: float = FIRST_BUCKET_BYTES,
    work: list[float] | None = None,
) -> list[Bucket]:
    """DDP's buckets, in the order they are all-reduced, of tensors given in registration order.

    A bucket takes tensors until it holds at least its limit (``first_bytes`` for the first,
    ``bucket_bytes`` after), as ``_compute_bucket_assignment_by_size`` does. It is ready when
    the backward pass has done the ``work`` (e.g. FLOPs) of its tensors' layers and of all
    before them; without ``work``, when it has produced their bytes.
    """
    weights = list(work) if work and sum(work) > 0 else list(tensor_bytes)
    total = sum(weights) or 1.0
    buckets: list[Bucket] = []
    current, done, limit = 0.0, 0.0, min(first_bytes, bucket_bytes)
    for size, weight in zip(reversed(tensor_bytes), reversed(weights), strict=True):
        current += size
        done += weight  # the backward pass produces the last layers first
        if current >= limit:
            buckets.append((current, done / total))
            current, limit = 0.0, bucket_bytes
    if current > 0:
        buckets.append((current, 1.0))
    return buckets


def exposed_s(
    buckets: list[Bucket], allreduce_s: Callable[[float], float], backward_s: float
) -> tuple[float, float]:
    """(all-reduce time in total, the part of it not hidden by the backward pass)."""
    free_at, busy = 0.0, 0.0
    for size, ready_fraction in buckets:
        took = allreduce_s(size)
        free_at = max(backward_s * ready_fraction, free_at) + took
        busy += took
    return busy, max(0.0, free_at - backward_s)
