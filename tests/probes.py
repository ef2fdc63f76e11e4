"""Hydra callbacks that tests attach to a real sweep with ``+hydra.callbacks.NAME._target_=...``.

They run in the sweeping process, around each job, without changing the suite's code.
"""

from __future__ import annotations

import resource
import signal
from typing import Any

from hydra.experimental.callback import Callback


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
