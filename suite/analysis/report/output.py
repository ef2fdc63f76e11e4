"""Where a report goes: its directory (owned by the report, see ``dpsuite.results.owned``), the
PNG and SVG of each plot, and what was written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dpsuite.analysis.report import figure_processes, plots, render
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
        self.plots: list[Plot] = []

    def add(self, plot: Plot) -> None:
        """A plot to draw and save (by ``write``)."""
        self.plots.append(plot)

    def write(self, meanwhile: Callable[[], None] | None = None) -> list[render.Figure]:
        """Draw and save every plot added, leaving out those that find nothing to draw: the
        page's figures, in the order the plots were added. ``meanwhile``: the report's own
        work, done while forked processes draw (see ``figure_processes``)."""
        files = figure_processes.save_all(self.plots, self._save, meanwhile)
        figures = []
        for plot, file in zip(self.plots, files, strict=True):
            if file is None:
                continue
            for path in (self.out / file, (self.out / file).with_suffix(".svg")):
                owned.record(path)  # (a forked process may have written it)
            figures.append(render.Figure(file=file, title=plot.title, caption=plot.caption))
        return figures

    def _save(self, plot: Plot) -> str | None:
        fig = plot.draw()
        if fig is None:
            return None
        file = f"{plot.name}.png"
        plots.save(fig, self.out / file)
        return file
