"""Hardware and software fingerprint recorded with every result, so runs group by machine."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
from collections.abc import Mapping
from functools import cache
from typing import Any


@cache
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def accelerator_info() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"accelerator": "none", "accelerator_count": 0, "accelerator_memory_gib": None}
    props = torch.cuda.get_device_properties(0)
    return {
        "accelerator": props.name,
        "accelerator_count": torch.cuda.device_count(),
        "accelerator_memory_gib": round(props.total_memory / 2**30, 1),
    }


def nccl_version() -> str | None:
    import torch

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # no NCCL in this build
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def fingerprint(
    tag: str | None, backend: str, workers_per_host: int, threads_per_worker: int, cores: int
) -> dict[str, Any]:
    """What ran this: machine, accelerator, software versions and how the cores were shared.

    ``cores`` are the CPUs this process may use (its affinity: under SLURM, its task's share of
    the allocation). ``cpu_count`` is the machine's, so that one node is one machine however its
    jobs were bound.
    """
    import torch

    allocated = _slurm_int("SLURM_CPUS_ON_NODE")
    fp: dict[str, Any] = {
        "tag": tag,
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count() or cores,
        "cpus_usable": cores,
        "cpus_allocated": allocated,  # the SLURM job's CPUs on this node
        **accelerator_info(),
        "backend": backend,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "workers_per_host": workers_per_host,
        "threads_per_worker": threads_per_worker,
        "oversubscribed": oversubscribed(workers_per_host, threads_per_worker, cores, allocated),
    }
    fp["machine_id"] = machine_id(fp)
    return fp


def oversubscribed(workers_per_host: int, threads: int, cores: int, allocated: int | None) -> bool:
    """More compute threads than cores: timings then measure contention, not the hardware.

    Judged per task, and per host: ranks that are SLURM tasks of their own each have their own
    CPUs (``cores`` is one task's share); workers spawned by one process share its ``cores``;
    on one host all workers share the allocation (or ``cores`` outside SLURM).
    """
    ranks_are_tasks = "SLURM_STEP_ID" in os.environ and slurm_tasks_on_node(os.environ) > 1
    per_task = 1 if ranks_are_tasks else workers_per_host
    return per_task * threads > cores or workers_per_host * threads > (allocated or cores)


def slurm_tasks_on_node(env: Mapping[str, str]) -> int:
    """How many tasks of this SLURM step run on this node (1 outside SLURM).

    ``srun -n2`` sets SLURM_STEP_TASKS_PER_NODE (and the allocation SLURM_TASKS_PER_NODE), not
    SLURM_NTASKS_PER_NODE, which only ``--ntasks-per-node`` sets. Their format lists a count
    per node, runs compressed: ``2(x3),1`` is 2, 2, 2, 1; SLURM_NODEID says which is ours.
    """
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        counts = _per_node_counts(env.get(key, ""))
        if counts:
            node = int(env.get("SLURM_NODEID", "0"))
            return counts[node] if node < len(counts) else counts[-1]
    return 1


def _per_node_counts(text: str) -> list[int]:
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            return []
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def _slurm_int(key: str) -> int | None:
    value = os.environ.get(key, "")
    return int(value) if value.isdigit() else None


def machine_id(fp: dict[str, Any]) -> str:
    """A short stable id of the hardware (not the software), for grouping untagged results."""
    keys = ("hostname", "cpu", "cpu_count", "accelerator", "accelerator_count")
    return hashlib.sha1(json.dumps([fp.get(k) for k in keys]).encode()).hexdigest()[:8]
