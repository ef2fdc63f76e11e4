"""Summarize a run's synchronization across ranks: bytes and operations per step."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from suite.engine import distributed as dd
from suite.sync.base import SyncStrategy


def all_ranks(values: list[float], device: torch.device) -> list[list[float]]:
    """``values`` from every rank, in rank order (float64)."""
    local = torch.tensor(values, dtype=torch.float64, device=device)
    if not dd.active():
        return [local.tolist()]
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [t.cpu().tolist() for t in gathered]


def all_ranks_objects(value: Any) -> list[Any]:
    if not dd.active():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def sync_metrics(strategy: SyncStrategy, device: torch.device) -> dict[str, Any]:
    """run.json metrics of the strategy; called on every rank (it gathers).

    Bytes and operations are a worker's per training step (totals over all steps divided by the
    steps; the busiest worker's), and for the parameter server also the server's. With one
    process nothing is communicated and everything is 0.
    """
    counter = strategy.counter
    steps = max(1, len(counter.steps))
    totals = all_ranks([counter.total_bytes, counter.total_ops], device)
    server = strategy.server_rank if len(totals) > 1 else None
    workers = [r for r in range(len(totals)) if r != server]
    worker_bytes = max(totals[r][0] for r in workers)
    counts = Counter(s.bytes for s in counter.steps)
    per_rank_counts = all_ranks_objects({str(b): n for b, n in sorted(counts.items())})
    return {
        "sync": strategy.spec.name,
        "bytes_per_step": worker_bytes / steps,
        "server_bytes_per_step": None if server is None else totals[server][0] / steps,
        "collectives_per_step": max(totals[r][1] for r in workers) / steps,
        "bytes_total": worker_bytes,
        # How many steps sent how many bytes (a worker's): PowerSGD's plain all-reduce steps
        # before compression starts, local SGD's averaging steps, show up here.
        "bytes_per_step_counts": per_rank_counts[workers[0]],
    }
