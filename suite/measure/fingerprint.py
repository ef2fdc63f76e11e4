"""Hardware and software fingerprint recorded with every result, so runs group by machine.

It is taken at the start of every run, so what cannot change within a process (CPU, GPUs and
their links, driver, libraries) is read once per process. Facts come from libraries where one
reads them: py-cpuinfo for the CPU model (/proc/cpuinfo as a fallback), PyTorch's
``torch.utils.collect_env`` for the OS, C library, NVIDIA driver and GPU models, and NVML
(``nvidia-ml-py``, the ``[nvml]`` extra) where a GPU is present for the driver, GPU models, PCIe
links and the NVLink/PCIe path between every pair of GPUs, as ``nvidia-smi topo -m`` shows it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from dpsuite.runtime.ranks import slurm_tasks_on_node

# Environment variables that change how communication and compute run (NCCL's algorithms and
# transports, thread counts and pinning, allocator settings, visible devices).
ENV_PREFIXES = (
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "GLOO_",
    "TP_SOCKET_IFNAME",
    "UCX_",
    "FI_",
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "NVIDIA_TF32_OVERRIDE",
)
NOT_RECORDED = ("KEY", "TOKEN", "SECRET", "PASSWORD")  # never write credentials into results


def relevant_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables among ``environ`` that can change a measurement, sorted by name."""
    return {
        k: environ[k]
        for k in sorted(environ)
        if k.startswith(ENV_PREFIXES) and not any(word in k for word in NOT_RECORDED)
    }


# Read when the process starts: dpsuite sets OMP_NUM_THREADS and GLOO_SOCKET_IFNAME for the
# workers it spawns, so a later read in a sweep would show the previous run's values, not the
# environment the command was started in (what workers were given is ``threads_per_worker``).
STARTING_ENV = relevant_env(os.environ)


@cache
def cpu_model() -> str:
    """The CPU's model name from py-cpuinfo; /proc/cpuinfo or the platform without it."""
    try:
        import cpuinfo

        brand = cpuinfo.get_cpu_info().get("brand_raw")
        if brand:
            return str(brand).strip()
    except Exception:  # not installed, or it could not read this machine: use the fallbacks
        pass
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


@cache
def system_software() -> dict[str, Any]:
    """OS release, C library and whether torch is a debug build (torch.utils.collect_env)."""
    import torch
    from torch.utils import collect_env

    return {
        "os_release": collect_env.get_os(collect_env.run),
        "libc": collect_env.get_libc_version(),
        "torch_debug_build": bool(torch.version.debug),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }


@cache
def gpu_details() -> dict[str, Any]:
    """Driver, GPU models, PCIe links and GPU-to-GPU paths; all None without a GPU.

    From NVML where nvidia-ml-py is installed, else driver and models from collect_env (which
    asks nvidia-smi) and no topology.
    """
    import torch

    details: dict[str, Any] = dict.fromkeys(GPU_KEYS)
    if not torch.cuda.is_available():
        return details
    from dpsuite.measure import gpu_topology

    try:
        details.update(gpu_topology.nvml_details())
    except gpu_topology.NvmlUnavailable:
        from torch.utils import collect_env

        models = collect_env.get_gpu_info(collect_env.run) or ""
        details["gpu_driver"] = collect_env.get_nvidia_driver_version(collect_env.run)
        details["gpu_models"] = "; ".join(line.strip() for line in models.splitlines()) or None
    return details


GPU_KEYS = ("gpu_driver", "gpu_models", "gpu_pcie", "gpu_nvlinks", "gpu_topology")


def nccl_version() -> str | None:
    import torch

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # no NCCL in this build
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def kernel_boot_id() -> str | None:
    """The running kernel's boot id: one per host, shared by every network namespace or
    container on it (two "nodes" with the same one share a host's memory and caches)."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def load_average() -> float | None:
    """The host's 1-minute load average now (runnable tasks; others' work on the host)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


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
        **system_software(),
        **gpu_details(),
        "workers_per_host": workers_per_host,
        "threads_per_worker": threads_per_worker,
        "oversubscribed": oversubscribed(workers_per_host, threads_per_worker, cores, allocated),
        "env": dict(STARTING_ENV),
        "kernel_boot_id": kernel_boot_id(),
        "load_average": load_average(),
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


def _slurm_int(key: str) -> int | None:
    value = os.environ.get(key, "")
    return int(value) if value.isdigit() else None


def machine_id(fp: dict[str, Any]) -> str:
    """A short stable id of the hardware (not the software), for grouping untagged results."""
    keys = ("hostname", "cpu", "cpu_count", "accelerator", "accelerator_count")
    return hashlib.sha1(json.dumps([fp.get(k) for k in keys]).encode()).hexdigest()[:8]
