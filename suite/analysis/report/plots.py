"""One function per plot. Each takes tables from `dpsuite.analysis.report.data` and returns a
Figure.

Figures are built with matplotlib's object API on the Agg backend (no display, no global pyplot
state) and share one style: labelled axes with units, log2 axes for workers and batch sizes, and
one colour per LR rule that is the same in every plot.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpsuite.analysis.report import critical_batch_fit  # noqa: E402
from dpsuite.analysis.report.text import plain_number  # noqa: E402
from dpsuite.optim.lr_rules import RULES  # noqa: E402
from dpsuite.results import owned  # noqa: E402

DPI = 110
STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 6,
}
RULE_COLORS = {name: rule.color for name, rule in RULES.items() if rule.color}
SERIES_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
MARKERS = ["o", "s", "^", "D", "v", "P"]
LINESTYLES = ["-", "--", ":", "-."]
HOLLOW = {"markerfacecolor": "white", "markeredgewidth": 1.5}
MAX_COLUMNS = 3  # panels per row: three fit the page width at a readable size
PANEL_WIDTH, PANEL_HEIGHT = 4.0, 3.2  # inches
DIVERGED_MARKER = {
    "marker": "X",
    "markersize": 10,
    "markeredgecolor": "black",
    "linestyle": "",
    "clip_on": False,
}


def styled(plot: Callable[..., Figure | None]) -> Callable[..., Figure | None]:
    """Build the figure under the shared style."""

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            return plot(*args, **kwargs)

    return wrapper


def save(fig: Figure, path: Path) -> None:
    """The PNG at ``path`` and an SVG beside it (same stem), byte for byte the same from the
    same results: no creation date, and SVG ids from a fixed salt (a committed report changes
    only where its numbers do)."""
    png, svg = io.BytesIO(), io.BytesIO()  # rendered first: a full disk never gets half
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    with matplotlib.rc_context({"svg.hashsalt": "dpsuite"}):
        fig.savefig(
            svg, format="svg", bbox_inches="tight", facecolor="white", metadata={"Date": None}
        )
    owned.write(path, png.getvalue())
    owned.write(path.with_suffix(".svg"), svg.getvalue())


def rule_color(rule: str) -> str:
    return RULE_COLORS.get(rule, "#7f7f7f")


def series_color(i: int) -> str:
    return SERIES_COLORS[i % len(SERIES_COLORS)]


def log2_axis(ax: Axes, values: Iterable[float], axis: str = "x") -> None:
    """A base-2 log axis with a tick (as a plain number) at every measured value."""
    ticks = sorted({float(v) for v in values if v and np.isfinite(v)})
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_major_locator(ticker.FixedLocator(ticks))
    target.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_locator(ticker.NullLocator())
    if len(ticks) == 1:  # one value: give the axis some room around it
        (ax.set_xlim if axis == "x" else ax.set_ylim)(ticks[0] / 1.5, ticks[0] * 1.5)


class DistinctPlainNumbers(ticker.Formatter):
    """Plain numbers (1,000 rather than 1e+03) with as many decimals as it takes for the ticks
    of an axis to read differently, each as the value it marks: a log axis spanning less than a
    decade gets linear ticks (5.6, 5.8, 6.0, ...) that whole numbers would all call "6"."""

    MAX_DECIMALS = 8

    def __call__(self, x: float, pos=None) -> str:
        return plain_number(x)

    def format_ticks(self, values) -> list[str]:
        values = [float(v) for v in values]
        labels = [plain_number(v) for v in values]
        decimals = 0
        while not self.readable(values, labels) and decimals < self.MAX_DECIMALS:
            decimals += 1
            labels = [f"{v:,.{decimals}f}" for v in values]
        return labels

    @staticmethod
    def readable(values: list[float], labels: list[str]) -> bool:
        """Every label different, and each within 1 % of the ticks' spacing of its value."""
        if len(set(labels)) < len(labels):
            return False
        gaps = np.diff(sorted(values))
        tolerance = 0.01 * float(gaps.min()) if len(gaps) else math.inf
        read = [float(label.replace(",", "")) for label in labels]
        return all(abs(r - v) <= tolerance for r, v in zip(read, values, strict=True))


def plain_log_axis(ax: Axes, axis: str = "y") -> None:
    """A base-10 log axis labelled 1, 2, 3, 5 per decade as plain numbers (no 10^k), each tick
    label distinct however narrow the range."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    target.set_major_formatter(DistinctPlainNumbers())
    target.set_minor_locator(ticker.NullLocator())


def percent_axis(ax: Axes) -> None:
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def accuracy_axis(ax: Axes, min_span: float = 10.0) -> None:
    """Percent labels, and at least ``min_span`` points of range so noise is not magnified."""
    percent_axis(ax)
    lo, hi = ax.get_ylim()
    if hi - lo < min_span:
        mid = (lo + hi) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
        shift = max(0.0, -lo) - max(0.0, hi - 100.0)
        ax.set_ylim(lo + shift, hi + shift)


# ---- 1-4: scaling and the all-reduce ---------------------------------------------------------


def panel_grid(n: int) -> tuple[Figure, list[Axes]]:
    """``n`` panels wrapped into rows of at most ``MAX_COLUMNS``, readable at page width."""
    cols = min(MAX_COLUMNS, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(PANEL_WIDTH * cols, PANEL_HEIGHT * rows + 0.8), layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def outside_legend(fig: Figure, handles: list, labels: list[str], title: str | None = None):
    """One legend for all panels, below them: never on top of the data."""
    cols = min(len(labels), 4)
    fig.legend(handles, labels, loc="outside lower center", ncols=cols, title=title)


# ---- 5-8: convergence --------------------------------------------------------------------------


# ---- 9-10: gradient noise scale and the critical batch ---------------------------------------


# ---- 11-14: the steps-to-target study ---------------------------------------------------------

ORACLE_COLOR = "black"
ORACLE_LINE = {"lw": 6, "alpha": 0.3, "solid_capstyle": "round"}
NEVER_MARKER = {"marker": "^", "markersize": 9, "linestyle": "", "clip_on": False}


def draw_never(ax: Axes, never: list[tuple[float, str]], y: float) -> None:
    """Triangles at height ``y`` for the (batch, colour) of curves that never reach the target
    there, side by side where several miss at the same batch."""
    for batch in sorted({b for b, _ in never}):
        colors = [c for b, c in never if b == batch]
        for i, color in enumerate(colors):
            shift = i - (len(colors) - 1) / 2
            ax.plot([batch * 2 ** (0.08 * shift)], [y], color=color, **NEVER_MARKER)


def target_label(goal: str) -> str:
    """The steps axis of a study: ``goal`` is the target on its split (``75 % test accuracy``)."""
    return f"steps to reach {goal} (log scale)"


def steps_axes(ax: Axes, batches: Iterable[float], finite: pd.Series) -> float:
    """Log-log axes sized to the measured steps; returns the top, where 'never' is drawn."""
    log2_axis(ax, batches)
    top = 2.5 * float(finite.max())
    ax.set_ylim(0.5 * float(finite.min()), top)
    plain_log_axis(ax, "y")
    ax.set_xlabel("global batch (samples per step)")
    return top


def perfect_line(
    ax: Axes, knee: critical_batch_fit.Knee, xs: np.ndarray, twice: bool = False
) -> None:
    ax.plot(xs, [knee.perfect(x) for x in xs], "k--", lw=1, label="perfect scaling (∝ 1/batch)")
    if twice:
        ax.plot(
            xs,
            [critical_batch_fit.KNEE_FACTOR * knee.perfect(x) for x in xs],
            ":",
            color="gray",
            lw=1.2,
            label=f"{critical_batch_fit.KNEE_FACTOR:g}× perfect",
        )


FIT_COLOR = "#9467bd"
