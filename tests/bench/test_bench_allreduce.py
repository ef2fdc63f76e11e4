"""pytest-benchmark: one fp32 sum all-reduce over 2 gloo ranks, at a few message sizes.

This process is rank 0; a helper process is rank 1 and performs, for every benchmark, exactly
as many all-reduces of the same size as the benchmark will (pedantic mode fixes the count).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from dpsuite.runtime import distributed
from dpsuite.runtime.ranks import Ranks

SIZES = {"64KiB": 2**16, "1MiB": 2**20, "16MiB": 2**24}
ROUNDS, WARMUP = 20, 3


def _peer(init_method: str, jobs: mp.Queue) -> None:
    """Rank 1: all-reduce (count, n) jobs until told to stop."""
    torch.set_num_threads(1)
    distributed.init_group("gloo", Ranks(1, 2, 1, 2), init_method, 120)
    while (job := jobs.get()) is not None:
        count, n = job
        buf = torch.ones(count)
        for _ in range(n):
            dist.all_reduce(buf)
    distributed.shutdown()


@pytest.fixture(scope="module")
def peer(request):
    if request.config.getoption("benchmark_skip", False):
        pytest.skip("benchmarks are skipped (run them with `nox -s bench`)")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="dpsuite-bench-") as tmp:
        init_method = Path(tmp, "store").as_uri()
        jobs = ctx.Queue()
        proc = ctx.Process(target=_peer, args=(init_method, jobs))
        proc.start()
        torch.set_num_threads(1)
        distributed.init_group("gloo", Ranks(0, 2, 0, 2), init_method, 120)
        yield jobs
        jobs.put(None)
        distributed.shutdown()
        proc.join(timeout=60)


@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
def test_allreduce_two_gloo_ranks(benchmark, peer, size):
    buf = torch.ones(size // 4)
    peer.put((buf.numel(), ROUNDS + WARMUP))
    benchmark.extra_info.update(size_bytes=size, world_size=2, backend="gloo", dtype="fp32")
    benchmark.pedantic(dist.all_reduce, args=(buf,), rounds=ROUNDS, warmup_rounds=WARMUP)
    # busbw = algbw * 2(n-1)/n = algbw for n = 2
    benchmark.extra_info["busbw_GBps_at_median"] = size / benchmark.stats.stats.median / 1e9
