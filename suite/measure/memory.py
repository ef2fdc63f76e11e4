"""Peak memory of a run: CPU resident set per rank, and CUDA memory allocated by PyTorch."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from dpsuite.measure.probes import Probe
from dpsuite.runtime import distributed

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> float | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


class MemoryProbe(Probe):
    """High-water marks from the start of the run to its end (max across ranks).

    The process's peak resident set (VmHWM) is reset at the start where Linux allows it
    (``/proc/self/clear_refs``), so a run inside a long sweep reports its own peak; where it
    cannot be reset the figure is the process's peak so far (``peak_rss_since_run_start``
    false). CUDA: ``torch.cuda.max_memory_allocated`` after a reset of the peak statistics.
    """

    def __init__(self, device: torch.device, estimated_bytes: int | None = None) -> None:
        self.device = device
        self.estimated_bytes = estimated_bytes  # what the run was estimated to need per rank
        self.reset = False
        with contextlib.suppress(OSError):
            CLEAR_REFS.write_text("5")  # 5: reset the peak resident set size to the current
            self.reset = True
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def metrics(self) -> dict[str, Any]:
        rss = _status_kib("VmHWM")
        cuda = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else 0
        peaks = distributed.max_across_ranks([rss or 0.0, float(cuda)], self.device)
        return {
            "peak_rss_mib": peaks[0] / 1024 if rss is not None else None,
            "peak_rss_since_run_start": self.reset,
            "peak_cuda_allocated_mib": peaks[1] / 2**20 if self.device.type == "cuda" else None,
            "estimated_rss_mib": (
                self.estimated_bytes / 2**20 if self.estimated_bytes is not None else None
            ),
        }
