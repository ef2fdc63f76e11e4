"""Hydra callbacks that tests attach to a real sweep with ``+hydra.callbacks.NAME._target_=...``.

They run in the sweeping process, around each job, without changing the suite's code.
"""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


def rss_kb() -> int:
    """Resident memory of this process (VmRSS), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class ResourceProbe(Callback):
    """After each job: append ``job,status,rss_kb,fds`` to ``out`` (a CSV)."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        status = job_return.return_value if job_return.status.name == "COMPLETED" else "error"
        line = f"{config.hydra.job.num},{status},{rss_kb()},{open_fds()}\n"
        with open(self.out, "a") as fh:  # closed before sampling the next job
            fh.write(line)


class FileSizeLimit(Callback):
    """From job ``at_job`` on, no file of this process may grow past ``max_bytes``: writes past
    it fail with EFBIG ("File too large"), as on a full disk (RLIMIT_FSIZE, SIGXFSZ ignored)."""

    def __init__(self, at_job: int, max_bytes: int) -> None:
        self.at_job, self.max_bytes = at_job, max_bytes

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        if config.hydra.job.num == self.at_job:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.max_bytes, hard))
