"""What one topic of a report contributes: its findings, plots, tables and headline candidates.

Each module of `dpsuite.analysis.report.sections` is one topic (scaling, the all-reduce, steps to
target, ...) and exposes ``section(context) -> Section``, ``TOPIC`` (the heading its findings
are filed under), ``PLOTS`` (the names of the PNGs it may write, before any study suffix) and
``HEADLINE`` (its headline candidates and their rank, see `headline`). `build` lists the
sections in the order the report shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from matplotlib.figure import Figure

from dpsuite.analysis.report import render


@dataclass
class Plot:
    """One plot of a section, drawn when the report is written (``draw`` may find nothing to
    draw and return None: then the plot is left out)."""

    name: str  # the PNG's stem: one of the section's PLOTS, with a "-<study>" suffix or not
    draw: Callable[[], Figure | None]
    title: str
    caption: str


@dataclass
class Section:
    findings: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    tables: list[render.Table] = field(default_factory=list)
    # Candidate headline sentences by name: names from the section's HEADLINE, which ranks them.
    headline: dict[str, str] = field(default_factory=dict)

    def plot(self, name: str, draw: Callable[[], Figure | None], title: str, caption: str) -> None:
        self.plots.append(Plot(name, draw, title, caption))

    def candidate(self, name: str, sentence: str | None) -> None:
        if sentence:
            self.headline[name] = sentence

    def extend(self, other: Section) -> None:
        """Add another section's findings, plots, tables and candidates after this one's."""
        self.findings += other.findings
        self.plots += other.plots
        self.tables += other.tables
        self.headline.update(other.headline)
