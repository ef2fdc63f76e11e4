"""What makes a run's timings mean less, said on the console as the run starts.

The fingerprint records it (``hardware.oversubscribed``, ``hardware.torch_debug_build``) and the
report shows it, but a user watching the run should not have to open run.json to learn that
what is being measured is contention: one line each on stderr, before any step is timed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO


def caveats(hardware: Mapping[str, Any]) -> list[str]:
    """One sentence per thing in the fingerprint ``hardware`` that distorts the timings."""
    found = []
    if hardware.get("oversubscribed"):
        workers = hardware.get("workers_per_host")
        threads = hardware.get("threads_per_worker")
        cores = hardware.get("cpus_allocated") or hardware.get("cpus_usable")
        found.append(
            f"oversubscribed: {workers} workers x {threads} threads on {cores} usable cores, so "
            f"the timings measure contention (lower workers or threads_per_worker)"
        )
    if hardware.get("torch_debug_build"):
        found.append("PyTorch is a debug build: its timings say little about a release build")
    return found


def announce(run_id: str, hardware: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """Print each caveat of the run as one warning line (stderr)."""
    for caveat in caveats(hardware):
        print(f"dpsuite: warning: {run_id}: {caveat}", file=stream or sys.stderr, flush=True)
