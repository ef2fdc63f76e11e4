"""The headline of a report: at most five sentences a reader acts on, chosen from the candidates
its sections computed (each section names its candidates, see `section.Section.candidate`).

Each section declares the candidates it may give and their priority (``HEADLINE``: name ->
rank, the lowest first); `priority` orders them across the sections, and as many as fit are
shown in that order (docs/reports.md lists it). Failed runs always take the last place. The
findings below the headline hold the details.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

import pandas as pd

from dpsuite.analysis.report.render import HEADLINE_MAX


def priority(sections: Iterable[ModuleType]) -> tuple[str, ...]:
    """Every candidate the sections declare (their ``HEADLINE``), by rank."""
    ranked = sorted((rank, name) for topic in sections for name, rank in topic.HEADLINE.items())
    ranks = [rank for rank, _ in ranked]
    names = [name for _, name in ranked]
    if len(set(ranks)) < len(ranks) or len(set(names)) < len(names):
        raise ValueError(f"headline candidates share a name or a rank: {ranked}")
    return tuple(names)


def choose(candidates: dict[str, str], runs: pd.DataFrame, order: tuple[str, ...]) -> list[str]:
    """The sentences in ``order`` (`priority`); a count of the failed runs always takes the
    last place."""
    unknown = set(candidates) - set(order)
    if unknown:
        raise ValueError(f"headline candidates without a priority: {sorted(unknown)}")
    chosen = [candidates[name] for name in order if candidates.get(name)]
    failed = int((runs["status"] == "failed").sum()) if not runs.empty else 0
    if failed:
        chosen = chosen[: HEADLINE_MAX - 1]
        chosen.append(f"{failed} of {len(runs)} runs failed; they are listed under Failed runs.")
    return chosen[:HEADLINE_MAX]
