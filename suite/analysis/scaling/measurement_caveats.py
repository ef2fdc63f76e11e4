"""What makes a fitted model's measurements less than a cluster's, said in `dpsuite predict`'s own
output: nodes that are one host (network namespaces or containers: one kernel), their cores
shared or pinned apart, and a host loaded by other work while it was measured.

Read from the fingerprints the results carry: ``hardware.kernels`` (comm-bench: the distinct
kernels its ranks ran on), ``hardware.nodes`` (a run across nodes: each node's kernel boot id
and usable cores), ``hardware.load_average`` and ``hardware.cpu_count``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# A host this loaded (runnable tasks per core) was busy with work of others while it measured.
LOADED_PER_CORE = 0.5


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series(np.nan, index=frame.index, dtype=object)


def _spans_nodes(bench: pd.DataFrame) -> pd.DataFrame:
    """comm-bench rows of ranks over several nodes."""
    if bench.empty:
        return bench
    per_host = pd.to_numeric(_column(bench, "hardware.workers_per_host"), errors="coerce")
    return bench[bench["world_size"] > per_host.fillna(bench["world_size"])]


def _shared_host(usable: float | None, cores: float | None, what: str) -> str:
    text = (
        f"the nodes {what} are one host (one kernel): they share its memory bandwidth and "
        "caches, and their link is the kernel's (e.g. a veth), not a NIC"
    )
    if usable is None or cores is None:
        return text
    if usable >= cores:
        return f"{text}; each node may use all {cores:.0f} cores, so their ranks time-share them"
    return f"{text}; each node pinned to {usable:.0f} of the host's {cores:.0f} cores"


def _number(values: pd.Series) -> float | None:
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    return float(numbers.median()) if len(numbers) else None


def bench_caveats(bench: pd.DataFrame) -> list[str]:
    """comm-bench across nodes that ran on one kernel."""
    across = _spans_nodes(bench)
    if across.empty:
        return []
    kernels = _number(_column(across, "hardware.kernels"))
    if kernels is None or kernels > 1:
        return []
    usable = _number(_column(across, "hardware.cpus_usable"))
    return [
        _shared_host(
            usable, _number(_column(across, "hardware.cpu_count")), "comm-bench ran across"
        )
    ]


def run_caveats(runs: pd.DataFrame) -> list[str]:
    """Runs across nodes whose nodes share one kernel."""
    for nodes in _column(runs, "hardware.nodes").dropna():
        if not isinstance(nodes, list) or len(nodes) < 2:
            continue
        ids = {n.get("kernel_boot_id") for n in nodes if isinstance(n, dict)}
        if len(ids) == 1 and None not in ids:
            usable = min((n.get("cpus_usable") or np.inf) for n in nodes)
            cores = nodes[0].get("cpu_count")
            return [_shared_host(None if usable == np.inf else usable, cores, "of the runs")]
    return []


def load_caveats(runs: pd.DataFrame, bench: pd.DataFrame) -> list[str]:
    """A host busy with others' work while the workers=1 runs or comm-bench measured."""
    parts = []
    for frame, what in ((runs, "the runs"), (bench, "comm-bench")):
        load = _number(_column(frame, "hardware.load_average")) if not frame.empty else None
        cores = _number(_column(frame, "hardware.cpu_count")) if not frame.empty else None
        if load is not None and cores and load > LOADED_PER_CORE * cores:
            parts.append(f"{load:.2f} on {cores:.0f} cores while {what} measured (median)")
    if not parts:
        return []
    return [
        "the host was loaded by other work: 1-minute load average "
        + "; ".join(parts)
        + ": what was measured is what that work left"
    ]


def caveats(runs: pd.DataFrame, bench: pd.DataFrame) -> tuple[str, ...]:
    """Every caveat that applies to a model fitted to ``runs`` and ``bench``."""
    return (*bench_caveats(bench), *run_caveats(runs), *load_caveats(runs, bench))
