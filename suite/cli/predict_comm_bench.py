"""`dpsuite predict --comm-bench RESULTS_DIR`: the network as that tree's comm-bench measured it,
for planning on a profile: its links fitted (one node, and across nodes where it ran across
them) and the bus bandwidth it measured per message size, which the model reads each bucket's
all-reduce off. A directory with nothing usable is one error line that says why."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from dpsuite import results
from dpsuite.analysis.scaling import fit, measurement_caveats
from dpsuite.analysis.scaling.measured_bandwidth import MeasuredBandwidth, from_bench
from dpsuite.analysis.scaling.profiles import Profile
from dpsuite.errors import UserError


class MeasuredNetwork(NamedTuple):
    """The profile with the links comm-bench measured, which were measured ("links": one node,
    "network": across nodes), the bus bandwidth it measured per message size, and the caveats
    of where it measured (``measurement_caveats``)."""

    profile: Profile
    links: tuple[str, ...] = ()
    bandwidth: MeasuredBandwidth | None = None
    caveats: tuple[str, ...] = ()


def measured_links(folder: str | None, profile: Profile) -> MeasuredNetwork:
    """The network as ``folder``'s comm-bench measured it, on ``profile``'s hardware."""
    if folder is None:
        return MeasuredNetwork(profile)
    if not Path(folder).is_dir():
        raise UserError(f"--comm-bench: results directory not found: {folder}")
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always")
        bench = results.load_comm_bench(folder)
    usable = fit.usable_rows(bench) if not bench.empty else bench
    if usable.empty:  # the unreadable files' reason is the error, said once
        why = f" ({skipped[0].message})" if skipped else ""
        raise UserError(f"--comm-bench {folder}: no error-free multi-rank all-reduce results{why}")
    for each in skipped:  # what was skipped beside results that were used
        warnings.warn(str(each.message), stacklevel=2)
    try:
        topology = fit.fit_topology(bench, profile.topology)
    except ValueError as exc:
        raise UserError(f"--comm-bench {folder}: {exc}") from None
    across = topology.inter is not profile.topology.inter
    links = ("links", "network") if across else ("links",)
    return MeasuredNetwork(
        replace(profile, topology=topology),
        links,
        from_bench(usable),
        tuple(measurement_caveats.bench_caveats(usable)),
    )
