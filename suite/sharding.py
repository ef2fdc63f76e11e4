"""Which samples each worker sees: DistributedSampler semantics, one global shuffle per epoch.

For every step, the union of the workers' per-worker batches is one contiguous block of the
epoch's global permutation, so N workers x batch b see exactly what 1 worker x batch N*b sees.
"""

from __future__ import annotations

import torch
from torch.utils.data import DistributedSampler


def worker_batches(
    num_samples: int, world: int, rank: int, per_worker: int, seed: int, epoch: int
) -> list[torch.Tensor]:
    """This worker's index batches for one epoch (the incomplete last batch is dropped)."""
    sampler = DistributedSampler(
        range(num_samples), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    indices = torch.tensor(list(iter(sampler)), dtype=torch.long)
    steps = len(indices) // per_worker
    return list(indices[: steps * per_worker].view(steps, per_worker))


def steps_per_epoch(num_samples: int, global_batch: int) -> int:
    return num_samples // global_batch


def all_worker_batches(
    num_samples: int, world: int, per_worker: int, seed: int, epoch: int
) -> list[list[torch.Tensor]]:
    """For simulated workers: per step, the list of every virtual worker's index batch."""
    per_rank = [
        worker_batches(num_samples, world, r, per_worker, seed, epoch) for r in range(world)
    ]
    return [list(step) for step in zip(*per_rank, strict=True)]
