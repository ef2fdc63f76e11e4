"""Whether N worker processes fit in this host's memory, checked before any of them starts.

A spawned rank imports what the launching process has imported (torch, the suite) before it
allocates a single buffer, so the launching process's own resident set, measured now, is the
least a rank costs (about 200 MB with torch on CPU). Without it, ``--workers 300`` passed the
check and then exhausted the host's memory.
"""

from __future__ import annotations

from pathlib import Path

from dpsuite.errors import UserError

MEMINFO = Path("/proc/meminfo")
SELF_STATUS = Path("/proc/self/status")


def _kib_field(path: Path, name: str) -> int | None:
    """A ``Name:  N kB`` line of a /proc file, in bytes (None where there is none)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def mem_available(meminfo: Path = MEMINFO) -> int | None:
    """The host's MemAvailable in bytes (None where /proc/meminfo has none)."""
    return _kib_field(meminfo, "MemAvailable")


def rank_footprint() -> int:
    """Bytes one rank needs before its own buffers: this process's resident set now."""
    return _kib_field(SELF_STATUS, "VmRSS") or 0


def human_size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def check_processes_fit(processes: int, what: str, meminfo: Path = MEMINFO) -> None:
    """UserError when ``processes`` ranks of this host's footprint exceed MemAvailable."""
    available, each = mem_available(meminfo), rank_footprint()
    if available is None or processes * each <= available:
        return
    raise UserError(
        f"{what}={processes} processes do not fit in memory: each needs at least "
        f"{human_size(each)} (this process's resident set, torch loaded), "
        f"{human_size(processes * each)} in all, {human_size(available)} available "
        "(MemAvailable); start fewer"
    )
