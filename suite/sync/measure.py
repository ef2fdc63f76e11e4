"""Summarize a run's synchronization across ranks: bytes and operations per step, and time."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from suite import distributed as dd
from suite.sync.base import SyncStrategy


def all_ranks(values: list[float], device: torch.device) -> list[list[float]]:
    """``values`` from every rank, in rank order (float64)."""
    local = torch.tensor(values, dtype=torch.float64, device=device)
    if not dd.active():
        return [local.tolist()]
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [t.tolist() for t in gathered]


def all_ranks_objects(value: Any) -> list[Any]:
    if not dd.active():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def max_across_ranks(values: list[float], device: torch.device) -> list[float]:
    if not values:  # the same on every rank: all run the same steps
        return []
    return dd.gather_max(torch.tensor(values, dtype=torch.float64, device=device)).tolist()


def mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def sync_metrics(
    strategy: SyncStrategy,
    timed_steps: list[int],
    step_max: list[float],
    device: torch.device,
) -> tuple[dict[str, Any], list[float] | None]:
    """run.json metrics of the strategy, and its communication seconds per timed step.

    Called on every rank (it gathers). Bytes and operations are a worker's (for the parameter
    server also the server's) per training step: totals over all steps divided by the steps.
    Times are per timed step, max across ranks: ``sync_time_s`` and ``sync_blocking_s`` are
    their means (periodic strategies communicate on some steps only); see `fill_in` for the
    step-time breakdown.
    """
    counter = strategy.counter
    steps = max(1, len(counter.steps))
    totals = all_ranks([counter.total_bytes, counter.total_ops], device)
    server = strategy.server_rank if len(totals) > 1 else None
    workers = [r for r in range(len(totals)) if r != server]
    worker_bytes = max(totals[r][0] for r in workers)
    worker_ops = max(totals[r][1] for r in workers)
    server_bytes = totals[server][0] if server is not None else None
    counts = Counter(s.bytes for s in counter.steps)
    shown = all_ranks_objects({str(b): n for b, n in sorted(counts.items())})[workers[0]]

    timed = [counter.steps[i] for i in timed_steps]
    seconds = max_across_ranks([s.seconds for s in timed], device)
    blocking = max_across_ranks([s.blocking_s for s in timed], device)
    overlapped = max_across_ranks([s.overlapped_s for s in timed], device)
    metrics: dict[str, Any] = {
        "sync": strategy.spec.name,
        "bytes_per_step": worker_bytes / steps,
        "server_bytes_per_step": None if server_bytes is None else server_bytes / steps,
        "collectives_per_step": worker_ops / steps,
        "bytes_total": worker_bytes,
        "bytes_per_step_counts": shown,
        "sync_time_s": None,
        "sync_blocking_s": None,
    }
    if not dd.active():
        return metrics, None  # one process: nothing was communicated, nothing to time
    metrics["sync_time_s"] = mean(seconds)
    metrics["sync_blocking_s"] = mean(blocking)
    metrics.update(fill_in(seconds, blocking, overlapped, step_max))
    return metrics, seconds


def fill_in(
    seconds: list[float], blocking: list[float], overlapped: list[float], step_max: list[float]
) -> dict[str, Any]:
    """The step-time breakdown, where this strategy's own timing tells all of it.

    Times are shares of the timed steps' wall time applied to the median step (``step_time_s``):
    that counts periodic exchanges (local SGD) at their real weight, is not thrown off by a few
    slow steps on a busy machine, and keeps compute + exposed = step. ``comm_time_s``: the share
    during which the strategy communicated. When no communication of the timed steps could
    overlap computation (every exchange happens outside the backward pass and is waited for),
    all of it is exposed, and compute is the rest of the step.
    """
    wall = sum(step_max)
    if not seconds or wall <= 0:
        return {}
    step_time = statistics.median(step_max)
    out: dict[str, Any] = {"comm_time_s": step_time * min(1.0, sum(seconds) / wall)}
    if any(o > 0 for o in overlapped):
        return out
    share = min(1.0, sum(blocking) / wall)
    out.update(
        exposed_comm_s=step_time * share,
        compute_time_s=step_time * (1 - share),
        comm_fraction=share,
    )
    return out
