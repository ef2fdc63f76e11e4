"""Process groups: join or create them, check replicas agree, and tear down cleanly."""

from __future__ import annotations

import gc
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def ranks_from_env() -> Ranks | None:
    """The ranks given by torchrun/elastic or by srun, or None when we must start them ourselves."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        return Ranks(
            int(env["RANK"]),
            world,
            int(env.get("LOCAL_RANK", 0)),
            int(env.get("LOCAL_WORLD_SIZE", world)),
        )
    # srun with several tasks; a single-task allocation still spawns its own workers.
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return Ranks(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_NTASKS"]),
            int(env.get("SLURM_LOCALID", 0)),
            int(env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0]),
        )
    return None


def slurm_master_env() -> None:
    """Under srun, point the env:// rendezvous at the first node unless already set."""
    env = os.environ
    if "SLURM_PROCID" not in env or "MASTER_ADDR" in env:
        return
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "127.0.0.1")
    import subprocess

    try:
        first = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
        ).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        first = nodelist.split(",")[0]
    env["MASTER_ADDR"] = first
    env.setdefault("MASTER_PORT", str(29500 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
    env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]


def device_for(device: str, local_rank: int) -> torch.device:
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_group(backend: str, ranks: Ranks, init_method: str, timeout_s: float) -> None:
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=ranks.rank,
        world_size=ranks.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def spawn_local(
    fn: Callable[..., None],
    args: tuple,
    nprocs: int,
    threads_per_worker: int,
    start_method: str = "spawn",
) -> None:
    """Start ``nprocs`` processes on this host as ``fn(local_rank, init_method, *args)``.

    They rendezvous through a FileStore in a private temporary directory. Raises what
    ``torch.multiprocessing.start_processes`` raises when a worker fails.
    """
    # Each child picks the thread count up at import; set it before they start.
    os.environ["OMP_NUM_THREADS"] = str(threads_per_worker)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this host
    with tempfile.TemporaryDirectory(prefix="dpsuite-store-") as tmp:
        init_method = Path(tmp, "store").as_uri()
        mp.start_processes(
            fn, args=(init_method, *args), nprocs=nprocs, start_method=start_method, join=True
        )


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (nothing to wait for without a process group)."""
    if active():
        dist.barrier()


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 over the exact bytes of every parameter and buffer."""
    h = hashlib.sha256()
    for t in list(model.parameters()) + list(model.buffers()):
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_identical_replicas(model: nn.Module) -> str:
    """Verify that every rank starts from bit-identical parameters; returns the digest."""
    digest = parameter_digest(model)
    if active():
        digests: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"ranks built different initial parameters: {digests}")
    return digest


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few scalars across ranks (float64), as plain floats."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if active():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def gather_max(values: torch.Tensor) -> torch.Tensor:
    """Element-wise max of a same-shaped tensor across ranks."""
    if active():
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values


def shutdown() -> None:
    """Leave the process group so that no rank aborts at exit.

    With gloo, a rank that exits while peers still hold the DDP reducer's communication threads
    can abort ("terminate called without an active exception"). The caller drops the DDP model
    and optimizer first; here we collect them, meet at a barrier and destroy the group.
    """
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
