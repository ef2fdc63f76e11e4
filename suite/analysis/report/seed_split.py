"""Seeds that split: where one setting's seeds end in two camps far apart (some train, some
collapse), their mean is an accuracy no seed reached, so the report quotes the median and says
how the seeds split.

The rule: sort the seeds' final accuracies; the seeds split where two neighbours lie more than
``SPLIT_POINTS`` apart. The seeds below the widest such gap **collapsed**, those above it
**reached** their accuracy. Seeds that spread evenly, with no such gap, do not split. A setting
is quoted by its seeds' median (`median`), and where they split the words say so (`describe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsuite.analysis.report.text import pct

# A gap between two seeds' final accuracies wider than this (a fraction: 15 points) splits them;
# seeds of one setting that train normally end within a few points of each other.
SPLIT_POINTS = 0.15


@dataclass(frozen=True)
class Split:
    collapsed: tuple[float, ...]  # the seeds below the gap, ascending
    reached: tuple[float, ...]  # the seeds above it, ascending

    @property
    def seeds(self) -> int:
        return len(self.collapsed) + len(self.reached)


def split(accs: Sequence[float]) -> Split | None:
    """The two camps of the seeds' final accuracies, or None where they do not split."""
    values = sorted(float(a) for a in accs if np.isfinite(a))
    if len(values) < 2:
        return None
    gaps = np.diff(values)
    widest = int(np.argmax(gaps))
    if gaps[widest] <= SPLIT_POINTS:
        return None
    return Split(tuple(values[: widest + 1]), tuple(values[widest + 1 :]))


def median(accs: Sequence[float]) -> float:
    """The seeds' median final accuracy; where they split into two camps of equal size, the
    collapsed camp's median, never the value between the camps that no seed reached."""
    values = [float(a) for a in accs if np.isfinite(a)]
    if not values:
        return float("nan")
    parts = split(values)
    middle = float(np.median(values))
    if parts is not None and parts.collapsed[-1] < middle < parts.reached[0]:
        return float(np.median(parts.collapsed))
    return middle


def camp(accs: tuple[float, ...]) -> str:
    """One camp's accuracy: the value of a single seed, ≈ the median of several."""
    if len(accs) == 1:
        return pct(accs[0])
    return "≈" + pct(float(np.median(accs)))


def describe(accs: Sequence[float]) -> str:
    """`` (2 of 3 seeds collapsed to ≈10.0 %, 1 reached 42.9 %)`` where the seeds split, else
    nothing: the words that follow a median quoted for these seeds."""
    parts = split(accs)
    if parts is None:
        return ""
    return (
        f" ({len(parts.collapsed)} of {parts.seeds} seeds collapsed to {camp(parts.collapsed)}, "
        f"{len(parts.reached)} reached {camp(parts.reached)})"
    )
