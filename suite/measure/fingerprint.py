"""Hardware and software fingerprint recorded with every result, so runs group by machine."""

from __future__ import annotations

import hashlib
import json
import platform
import socket
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
    """What ran this: machine, accelerator, software versions and how the cores were shared."""
    import torch

    fp: dict[str, Any] = {
        "tag": tag,
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": cores,
        **accelerator_info(),
        "backend": backend,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "workers_per_host": workers_per_host,
        "threads_per_worker": threads_per_worker,
        # More compute threads than cores: timings then measure contention, not the hardware.
        "oversubscribed": workers_per_host * threads_per_worker > cores,
    }
    fp["machine_id"] = machine_id(fp)
    return fp


def machine_id(fp: dict[str, Any]) -> str:
    """A short stable id of the hardware (not the software), for grouping untagged results."""
    keys = ("hostname", "cpu", "cpu_count", "accelerator", "accelerator_count")
    return hashlib.sha1(json.dumps([fp.get(k) for k in keys]).encode()).hexdigest()[:8]
