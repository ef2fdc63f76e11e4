"""Local SGD replicas, watched step by step in two real processes (gloo, DDP, FileStore).

Each rank trains the strategy's DDP-wrapped model on its own data and, after every step, the
ranks compare SHA-256 digests of their parameters: they must agree exactly after warm-up steps
and averaging steps, and differ in between.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from dpsuite.runtime import distributed
from dpsuite.runtime.ranks import Ranks
from dpsuite.sync import build
from dpsuite.sync.local_sgd import LocalSGDConfig

pytestmark = pytest.mark.multiproc

WORLD = 2
STEPS = 12
PERIOD, WARMUP = 3, 2


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).double()


def _worker(rank: int, store: str, out: str) -> None:
    distributed.init_group("gloo", Ranks(rank, WORLD, rank, WORLD), store, timeout_s=60)
    model = tiny_model()
    strategy = build(LocalSGDConfig(period=PERIOD, warmup_steps=WARMUP), torch.device("cpu"), WORLD)
    net = strategy.wrap(model, bucket_cap_mb=25)
    strategy.comm_hook().register(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    log = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(16, 8, generator=gen, dtype=torch.float64)
        net(x).square().mean().backward()
        strategy.sync_gradients(model)
        opt.step()
        strategy.after_step(model)
        comm = strategy.counter.end_step()
        before = distributed.parameter_digest(model)
        shown = distributed.parameter_digest(
            strategy.eval_model(model)
        )  # a collective on every rank
        assert distributed.parameter_digest(model) == before, (
            "evaluating must not change the replica"
        )
        digests: list = [None] * WORLD
        dist.all_gather_object(digests, [before, shown])
        log.append(
            {
                "replicas_equal": digests[0][0] == digests[1][0],
                "evaluated_equal": digests[0][1] == digests[1][1],
                "bytes": comm.bytes,
                "in_sync": strategy.replicas_in_sync,
            }
        )
    if rank == 0:
        Path(out).write_text(json.dumps(log))
    del net
    distributed.shutdown()


def test_replicas_agree_exactly_at_averaging_points_and_differ_between(tmp_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    out = tmp_path / "log.json"
    store = (tmp_path / "store").as_uri()
    mp.start_processes(_worker, args=(store, str(out)), nprocs=WORLD, start_method="spawn")
    log = json.loads(out.read_text())
    # Steps are numbered from 1. Warm-up steps 1-2 all-reduce gradients; PeriodicModelAverager
    # then averages after step 3 (its first step past warm-up) and every 3 steps after.
    averaged = {3, 6, 9, 12}
    synced = averaged | set(range(1, WARMUP + 1))
    params = sum(p.numel() for p in tiny_model().parameters()) * 8
    for step, entry in enumerate(log, start=1):
        assert entry["replicas_equal"] == (step in synced), (step, entry)
        assert entry["in_sync"] == (step in synced), step
        assert entry["evaluated_equal"], f"step {step}: every rank must evaluate the same model"
        assert entry["bytes"] == (params if step in synced else 0), (step, entry)
