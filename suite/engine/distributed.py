"""Process groups: join or create them, check replicas agree, and tear down cleanly."""

from __future__ import annotations

import gc
import hashlib
import os
import signal
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

from suite.measure.fingerprint import slurm_tasks_on_node


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def ranks_from_env() -> Ranks | None:
    """The ranks given by torchrun, submitit or srun, or None when we must start them ourselves."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        return Ranks(
            int(env["RANK"]),
            world,
            int(env.get("LOCAL_RANK", 0)),
            int(env.get("LOCAL_WORLD_SIZE", world)),
        )
    # A submitit job (SLURM or local) with several tasks: one task per rank.
    if env.get("SUBMITIT_EXECUTOR") and _submitit_tasks() > 1:
        import submitit

        job = submitit.JobEnvironment()
        return Ranks(job.global_rank, job.num_tasks, job.local_rank, job.num_tasks // job.num_nodes)
    # srun with several tasks; a single-task allocation still spawns its own workers.
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return Ranks(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_NTASKS"]),
            int(env.get("SLURM_LOCALID", 0)),
            slurm_tasks_on_node(env),
        )
    return None


def _submitit_tasks() -> int:
    env = os.environ
    if env.get("SUBMITIT_EXECUTOR") == "local":
        return int(env.get("SUBMITIT_LOCAL_NTASKS", "1"))
    return int(env.get("SLURM_NTASKS", "1"))


def slurm_master_env() -> None:
    """Under submitit or srun, point the env:// rendezvous at the first node unless already set."""
    env = os.environ
    if env.get("SUBMITIT_EXECUTOR") and "MASTER_ADDR" not in env:
        from submitit.helpers import TorchDistributedEnvironment

        # First node's hostname, a port derived from the job id, RANK, WORLD_SIZE, LOCAL_RANK.
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        return
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


class WorkerFailure(RuntimeError):
    """A local worker raised or died; the message names the root cause."""


STOP_GRACE_S = 5.0


def spawn_local(
    fn: Callable[..., None],
    args: tuple,
    nprocs: int,
    threads_per_worker: int,
    start_method: str = "spawn",
) -> None:
    """Start ``nprocs`` processes on this host as ``fn(local_rank, init_method, *args)`` and
    supervise them until they end.

    They rendezvous through a FileStore in a private temporary directory. A worker that dies or
    raises stops its siblings at once (they would otherwise wait in a collective until the
    process-group timeout) and raises WorkerFailure; an interrupt of the launcher (Ctrl-C,
    SIGTERM turned into an exception) stops them too before it propagates.
    """
    # Each child picks the thread count up at import; set it before they start.
    os.environ["OMP_NUM_THREADS"] = str(threads_per_worker)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this host
    with tempfile.TemporaryDirectory(prefix="dpsuite-store-") as tmp:
        init_method = Path(tmp, "store").as_uri()
        ctx = mp.start_processes(
            _child,
            args=(fn, init_method, *args),
            nprocs=nprocs,
            start_method=start_method,
            join=False,
        )
        try:
            while not ctx.join(timeout=1.0, grace_period=STOP_GRACE_S):
                pass
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            raise WorkerFailure(failure_reason(ctx.processes, exc)) from None
        except BaseException:
            stop_workers(ctx.processes)
            raise


def _child(local_rank: int, fn: Callable[..., None], init_method: str, *args) -> None:
    die_with_parent()
    fn(local_rank, init_method, *args)


def die_with_parent() -> None:
    """Linux: have the kernel send SIGTERM to this worker if its launcher dies (even SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before we asked
        os._exit(1)


def failure_reason(processes, exc: Exception) -> str:
    """Name the root cause: a worker killed by a signal, else the first error raised."""
    killed = [
        (i, p.exitcode)
        for i, p in enumerate(processes)
        if p.exitcode is not None and p.exitcode < 0 and -p.exitcode != signal.SIGTERM
    ]
    raised = ""
    if isinstance(exc, mp.ProcessRaisedException):
        raised = f"rank {exc.error_index}: {str(exc).strip().splitlines()[-1][:200]}"
    if not killed:
        return raised or f"worker {exc.error_index} exited with code {exc.exit_code}"
    i, code = killed[0]
    reason = f"worker {i} died ({signal.Signals(-code).name})"
    return f"{reason}; then {raised}" if raised else reason


def stop_workers(processes) -> None:
    """SIGTERM every live worker, then SIGKILL what is left after a grace period."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(STOP_GRACE_S)
        if p.is_alive():
            p.kill()
            p.join()


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
    if not (dist.is_available() and dist.is_initialized()):
        return  # nothing to leave; a full collection per run would slow in-process sweeps
    gc.collect()
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()
