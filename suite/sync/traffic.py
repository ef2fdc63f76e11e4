"""Summarize a run's synchronization across ranks: bytes sent and operations per step."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dpsuite.runtime import distributed
from dpsuite.sync.base import SyncStrategy


def all_ranks(values: list[float], device: torch.device) -> list[list[float]]:
    """``values`` from every rank, in rank order (float64)."""
    local = torch.tensor(values, dtype=torch.float64, device=device)
    if not distributed.active():
        return [local.tolist()]
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [t.cpu().tolist() for t in gathered]


def all_ranks_objects(value: Any) -> list[Any]:
    if not distributed.active():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def sync_metrics(strategy: SyncStrategy, net: nn.Module, device: torch.device) -> dict[str, Any]:
    """run.json metrics of the strategy; called on every rank (it gathers).

    Bytes are sent on the wire by one rank per training step (`dpsuite.sync.counter`): a worker's
    (the busiest), and for the parameter server also the server's. With one process nothing is
    communicated and everything is 0.
    """
    counter = strategy.counter
    steps = max(1, len(counter.steps))
    fixed_bytes, fixed_ops = strategy.fixed_step_traffic(net)
    local = [counter.total_bytes + fixed_bytes * steps, counter.total_ops + fixed_ops * steps]
    totals = all_ranks(local, device)
    server = strategy.server_rank if len(totals) > 1 else None
    workers = [r for r in range(len(totals)) if r != server]
    worker_bytes = max(totals[r][0] for r in workers)
    per_step = Counter(round(s.bytes + fixed_bytes) for s in counter.steps)
    histograms = all_ranks_objects(sorted([b, n] for b, n in per_step.items()))
    return {
        "wire_bytes_per_step": worker_bytes / steps,
        "server_wire_bytes_per_step": None if server is None else totals[server][0] / steps,
        "collectives_per_step": max(totals[r][1] for r in workers) / steps,
        "wire_bytes_total": worker_bytes,
        # [bytes, steps] pairs (a worker's): PowerSGD's plain all-reduce steps before
        # compression starts and local SGD's averaging steps show up as their own rows.
        "wire_bytes_histogram": histograms[workers[0]],
    }
