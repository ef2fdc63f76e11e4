"""Sharding follows torch's DistributedSampler exactly, however it is computed."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from dpsuite.engine.sharding import all_worker_batches, steps_per_epoch, worker_batches


def sampler_batches(n: int, world: int, rank: int, per_worker: int, seed: int, epoch: int):
    sampler = DistributedSampler(
        range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    idx = list(iter(sampler))
    steps = len(idx) // per_worker
    return [idx[k * per_worker : (k + 1) * per_worker] for k in range(steps)]


@settings(deadline=None)
@given(
    n=st.integers(1, 300),
    world=st.integers(1, 9),
    per_worker=st.integers(1, 17),
    seed=st.integers(0, 5),
    epoch=st.integers(0, 3),
)
def test_worker_batches_equal_distributed_sampler(n, world, per_worker, seed, epoch):
    simulated = all_worker_batches(n, world, per_worker, seed, epoch)
    assert len(simulated) == steps_per_epoch(n, world * per_worker)
    for rank in range(world):
        expected = sampler_batches(n, world, rank, per_worker, seed, epoch)
        mine = [b.tolist() for b in worker_batches(n, world, rank, per_worker, seed, epoch)]
        assert mine == expected
        assert [step[rank].tolist() for step in simulated] == expected


def test_each_step_is_one_block_of_the_epoch_shuffle():
    steps = all_worker_batches(1000, 4, 8, seed=1, epoch=2)
    one = worker_batches(1000, 1, 0, 32, seed=1, epoch=2)
    for union, single in zip(steps, one, strict=False):
        assert sorted(torch.cat(union).tolist()) == sorted(single.tolist())
