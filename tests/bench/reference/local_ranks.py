"""N local gloo ranks for the bare reference loops, in plain PyTorch (no dpsuite code).

Each rank gets ``--threads`` threads (default cores / N) and meets the others through a
FileStore in a temporary directory; ``worker(rank, store_uri, args)`` runs in every rank.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch.multiprocessing as mp


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="default: cores / workers")


def start(worker: Callable[[int, str, argparse.Namespace], None], args: argparse.Namespace) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.threads = args.threads or max(1, (cores or 1) // args.workers)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp, "store").as_uri()
        mp.start_processes(worker, args=(store, args), nprocs=args.workers, start_method="spawn")
