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

While an all-reduce runs, NCCL's kernel holds one SM (a thread block) per channel, so the backward
pass it overlaps runs on the others (``schedule``, with ``sm_share`` = channels / SMs): it does
(1 - sm_share) of its work per second, its buckets are ready later, and it ends later.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Bucket = tuple[float, float]  # (bytes, fraction of the backward pass done when it is ready)
Span = tuple[float, float]  # (start, end) of one all-reduce, seconds into the backward pass


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


def _advance(t: float, work: float, target: float, busy: list[Span], rate: float) -> float:
    """When the backward pass, at ``work`` done at time ``t``, reaches ``target``: it does
    ``rate`` of its work per second inside the ``busy`` spans (sorted, disjoint), all outside."""
    for start, end in busy:
        if end <= t:
            continue
        if start > t:
            if work + (start - t) >= target:
                return t + (target - work)
            work, t = work + (start - t), start
        if work + (end - t) * rate >= target:
            return t + (target - work) / rate
        work, t = work + (end - t) * rate, end
    return t + (target - work)


@dataclass(frozen=True)
class Schedule:
    """The all-reduces against the backward pass: their time in total, the part that runs past
    the backward pass, and how much later the backward pass ends for sharing the GPU's SMs."""

    comm_s: float
    exposed_s: float
    slowed_s: float


def schedule(
    buckets: list[Bucket], allreduce_s: Callable[[float], float], backward_s: float, sm_share: float
) -> Schedule:
    """The bucket schedule of ``exposed_s`` with the backward pass running on ``1 - sm_share`` of
    the GPU while an all-reduce is in flight (``sm_share`` in [0, 1))."""
    if not 0 <= sm_share < 1:
        raise ValueError(f"sm_share must be in [0, 1), got {sm_share}")
    if sm_share == 0:
        comm, exposed = exposed_s(buckets, allreduce_s, backward_s)
        return Schedule(comm, exposed, 0.0)
    rate, busy = 1 - sm_share, []
    t = work = free_at = comm = 0.0
    for size, ready_fraction in buckets:
        t = _advance(t, work, backward_s * ready_fraction, busy, rate)
        work = backward_s * ready_fraction
        took = allreduce_s(size)
        start = max(t, free_at)
        free_at = start + took
        busy.append((start, free_at))
        comm += took
    end = _advance(t, work, backward_s, busy, rate)
    return Schedule(comm, max(0.0, free_at - end), end - backward_s)
