"""This host as a run sees it: its usable cores, SLURM's tasks on it, the backend for a device,
waiting for a device's queued work, and whether a results directory can be written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from dpsuite.errors import UserError


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
