"""A bare all-reduce loop in plain PyTorch (no dpsuite code): the yardstick for comm-bench.

    python tests/bench/reference/bare_allreduce.py --workers 2 --sizes-mib 1 4 16 64

N processes (torch.multiprocessing, FileStore rendezvous, gloo), each with cores/N threads. For
each size: ``--warmup`` untimed in-place fp32 sum all-reduces, then ``--iters`` timed ones; the
time per all-reduce is the slowest rank's mean, algbw = bytes / time, busbw = algbw * 2(n-1)/n
(nccl-tests' definitions, GB/s = 1e9 bytes/s). Prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import time

import local_ranks  # beside this script: both bare loops start their ranks alike
import torch
import torch.distributed as dist


def worker(rank: int, store: str, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=args.workers)
    n = args.workers
    for mib in args.sizes_mib:
        size = int(mib * 2**20)
        buf = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        t = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        algbw = size / float(t) / 1e9
        if rank == 0:
            print(
                json.dumps(
                    {
                        "size_bytes": size,
                        "time_us": float(t) * 1e6,
                        "algbw_GBps": algbw,
                        "busbw_GBps": algbw * 2 * (n - 1) / n,
                    }
                ),
                flush=True,
            )
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    local_ranks.add_arguments(p)
    p.add_argument("--sizes-mib", type=float, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    local_ranks.start(worker, p.parse_args())


if __name__ == "__main__":
    main()
