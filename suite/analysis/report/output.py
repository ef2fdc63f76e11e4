"""Where a report goes: its directory (owned by the report, see ``dpsuite.results.owned``), the
PNG and SVG of each plot, and what was written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dpsuite.analysis.report import plots, render
from dpsuite.analysis.report.section import Plot
from dpsuite.errors import UserError
from dpsuite.results import owned


@dataclass
class Written:
    out: Path
    warnings: list[str]
    headline: list[str] = field(default_factory=list)


def default_out(results_dir: str | Path) -> Path:
    return Path("reports") / Path(results_dir).resolve().name


def prepare_out(out: Path) -> Path:
    """Create the output directory; what an earlier report wrote there and this one does not
    is removed at the end by its manifest (``dpsuite.results.owned``), nothing else."""
    try:
        return owned.begin(out)
    except owned.OutputWriteError as exc:
        raise UserError(f"cannot write the report to {out}: {exc.reason}") from None


class FigureWriter:
    """Saves figures into the report directory and remembers them for the page."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.figures: list[render.Figure] = []

    def add(self, plot: Plot) -> None:
        """Draw ``plot`` and save it, unless it finds nothing to draw."""
        fig = plot.draw()
        if fig is None:
            return
        file = f"{plot.name}.png"
        plots.save(fig, self.out / file)
        self.figures.append(render.Figure(file=file, title=plot.title, caption=plot.caption))
