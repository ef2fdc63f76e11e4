"""This host as a run sees it: its usable cores, SLURM's tasks on it, the backend for a device,
waiting for a device's queued work, and whether a results directory can be written."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from suite.errors import UserError


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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


def resolve_backend(backend: str, device: str) -> str:
    if backend == "auto":
        return "nccl" if device == "cuda" else "gloo"
    if backend == "nccl" and device != "cuda":
        raise UserError("backend=nccl needs device=cuda")
    return backend


def wait_for_device(device: torch.device) -> None:
    """Wait for queued device work so a clock reading means what it says."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_writable(results_dir: str) -> None:
    """Fail now, not after an hour of training, if results cannot be written."""
    if not results_dir.strip():
        raise UserError("results_dir is empty: name a directory for the results")
    path = Path(results_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserError(f"results_dir '{results_dir}' is not writable: {exc.strerror}") from None
