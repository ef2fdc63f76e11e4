"""How samples are dealt (torch's DistributedSampler, for both data forms) and what the engine
does with a batch of any structure."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset

from dpsuite.engine.batch_sources import (
    DealtItems,
    index_batches,
    one_line,
    worker_index_batches,
)
from dpsuite.workloads import batch_tree


def sampler_batches(n: int, world: int, rank: int, per_worker: int, seed: int, epoch: int):
    """What a DataLoader over DistributedSampler(drop_last) with drop_last batches gives."""
    sampler = DistributedSampler(
        range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    return list(BatchSampler(sampler, per_worker, drop_last=True))


@settings(deadline=None, derandomize=True, max_examples=60)
@given(
    n=st.integers(1, 300),
    world=st.integers(1, 9),
    per_worker=st.integers(1, 17),
    seed=st.integers(0, 5),
    epoch=st.integers(0, 3),
)
def test_simulated_workers_take_what_ddp_ranks_take(n, world, per_worker, seed, epoch):
    simulated = worker_index_batches(n, world, per_worker, seed, epoch)
    for rank in range(world):
        expected = sampler_batches(n, world, rank, per_worker, seed, epoch)
        ranks_own = index_batches(n, world, rank, per_worker, seed, epoch)
        assert [b.tolist() for b in ranks_own] == expected
        assert [step[rank].tolist() for step in simulated] == expected


def test_each_step_is_one_block_of_the_epoch_shuffle():
    steps = worker_index_batches(1000, 4, 8, seed=1, epoch=2)
    one = index_batches(1000, 1, 0, 32, seed=1, epoch=2)
    assert len(steps) == len(one) == 1000 // 32
    for union, single in zip(steps, one, strict=True):
        assert sorted(torch.cat(union).tolist()) == sorted(single.tolist())


def test_batches_of_any_structure():
    batch = {"x": torch.arange(12.0).view(6, 2), "meta": (torch.arange(6), "names")}
    assert batch_tree.size(batch) == 6 and batch_tree.problem(batch) is None
    first, second = batch_tree.halves(batch)
    assert batch_tree.size(first) == 3 and batch_tree.size(second) == 3
    assert torch.equal(batch_tree.cat([first, second])["x"], batch["x"])
    assert batch_tree.strided(batch, 1, 3)["meta"][0].tolist() == [1, 4]
    moved = batch_tree.to_device(batch, torch.device("cpu"), torch.float64)
    assert moved["x"].dtype == torch.float64 and moved["meta"][0].dtype == torch.int64
    assert moved["meta"][1] == "names"


@pytest.mark.parametrize(
    "batch,says",
    [
        ("text", "a batch must hold tensors, got str"),
        ((torch.tensor(1.0), torch.tensor(2)), "needs a batch dimension"),
        ((torch.zeros(4, 2), torch.zeros(3)), "different lengths [3, 4]"),
    ],
)
def test_a_batch_the_engine_cannot_train_on_is_named(batch, says):
    assert says in batch_tree.problem(batch)


def test_an_error_from_a_loader_worker_is_its_original_line():
    wrapped = RuntimeError(
        "Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
        'last):\n  File "x.py", line 1\nValueError: cannot decode this file'
    )
    assert one_line(wrapped) == "ValueError: cannot decode this file"
    assert one_line(RuntimeError("first\nsecond")) == "RuntimeError: first"


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(40))


@pytest.mark.parametrize("loader_workers", [0, 2])
def test_a_stream_is_dealt_in_whole_batches_and_in_order(loader_workers):
    """Rank 1 of 2 takes items 1, 3, 5, ...; its loader workers get whole batches of them, so
    drop_last drops only the stream's last incomplete batch, and the batches come in order."""
    loader = DataLoader(
        DealtItems(Stream(), world=2, rank=1, batch=4),
        batch_size=4,
        drop_last=True,
        num_workers=loader_workers,
        multiprocessing_context="fork" if loader_workers else None,
    )
    got = [b.tolist() for b in loader]
    assert got == [list(range(1, 40, 2))[k : k + 4] for k in range(0, 20, 4)]
