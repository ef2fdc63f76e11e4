"""Write a report as HTML (opens from disk, images beside it) and Markdown, from one model."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dpsuite.results import owned

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } .meta { color: #555; margin-top: 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.92em; margin-top: 0.3em; }
.table { overflow-x: auto; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
code { background: #f4f4f4; padding: 0 3px; border-radius: 3px; }
.warnings li { color: #8a5300; }
.headline { background: #f3f7fb; border-left: 4px solid #1f77b4; padding: 0.4em 1em 0.4em 2em;
            font-size: 1.05em; }
.headline li { margin: 0.3em 0; }
details { margin: 0.3em 0; } summary { cursor: pointer; font-weight: 600; }
.svg-link { font-size: 0.85em; }
"""
HEADLINE_MAX = 5  # sentences at the top: what a reader acts on
OTHER_TOPIC = "Other"


@dataclass
class Figure:
    file: str  # PNG name, relative to the report directory; the SVG has the same stem
    title: str
    caption: str

    @property
    def svg(self) -> str:
        return str(Path(self.file).with_suffix(".svg"))


@dataclass
class Table:
    title: str
    frame: pd.DataFrame
    note: str = ""


@dataclass
class Report:
    """What a report shows, top to bottom: headline, lead tables, findings by topic, figures,
    tables, warnings. Sections append sentences to ``findings``; ``file`` moves them under a
    topic."""

    title: str
    meta: list[str]  # lines under the title: source, machines, run counts
    headline: list[str] = field(default_factory=list)
    lead_tables: list[Table] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    topics: dict[str, list[str]] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def file(self, topic: str) -> None:
        """Put the findings added since the last call under ``topic``."""
        if self.findings:
            self.topics.setdefault(topic, []).extend(self.findings)
            self.findings.clear()

    def grouped(self) -> dict[str, list[str]]:
        """Findings by topic; any not filed come last, under "Other"."""
        groups = {topic: list(found) for topic, found in self.topics.items()}
        if self.findings:
            groups.setdefault(OTHER_TOPIC, []).extend(self.findings)
        return groups


def inline_html(text: str) -> str:
    """Escape, then turn `name` into <code>name</code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def table_html(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell_text(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    # A table wider than the page (many columns, long run ids) scrolls in its own box: the
    # page itself never scrolls sideways.
    return (
        f'<div class="table"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def cell_text(value) -> str:
    if isinstance(value, float):
        if value != value:  # NaN (pd.isna costs more, cell by cell of a 10,000-run table)
            return ""
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if value is None:
        return ""
    return str(value)


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
        *(f'<p class="meta">{inline_html(line)}</p>' for line in report.meta),
    ]
    if report.headline:
        parts.append('<ul class="headline">')
        parts += [f"<li>{inline_html(s)}</li>" for s in report.headline[:HEADLINE_MAX]]
        parts.append("</ul>")
    parts += [table_section_html(t) for t in report.lead_tables]
    groups = report.grouped()
    if groups:
        parts.append("<h2>Findings</h2>")
    for topic, found in groups.items():
        parts.append(f"<details><summary>{html.escape(topic)} ({len(found)})</summary><ul>")
        parts += [f"<li>{inline_html(f)}</li>" for f in found]
        parts.append("</ul></details>")
    if report.figures:
        parts.append("<h2>Plots</h2>")
    for fig in report.figures:
        src, svg = html.escape(fig.file, quote=True), html.escape(fig.svg, quote=True)
        parts.append(
            f'<figure id="{html.escape(Path(fig.file).stem)}"><h3>{inline_html(fig.title)}</h3>'
            f'<a href="{svg}"><img src="{src}" alt="{html.escape(fig.title, quote=True)}"></a>'
            f"<figcaption>{inline_html(fig.caption)} "
            f'<a class="svg-link" href="{svg}">SVG</a></figcaption></figure>'
        )
    parts += [table_section_html(t) for t in report.tables]
    if report.warnings:
        parts.append('<h2>Warnings</h2><ul class="warnings">')
        parts += [f"<li>{html.escape(w)}</li>" for w in report.warnings]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def table_section_html(table: Table) -> str:
    parts = [f"<h2>{html.escape(table.title)}</h2>"]
    if table.note:
        parts.append(f"<p>{inline_html(table.note)}</p>")
    parts.append(table_html(table.frame))
    return "\n".join(parts)


def table_markdown(frame: pd.DataFrame) -> str:
    def cell(v) -> str:
        return cell_text(v).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(map(str, frame.columns)) + " |",
        "|" + "---|" * len(frame.columns),
    ]
    lines += [
        "| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines)


def table_section_markdown(table: Table) -> list[str]:
    parts = [f"## {table.title}", ""]
    if table.note:
        parts += [table.note, ""]
    return [*parts, table_markdown(table.frame), ""]


def render_markdown(report: Report) -> str:
    parts = [f"# {report.title}", "", *(f"{line}  " for line in report.meta), ""]
    if report.headline:
        parts += [*(f"- **{s}**" for s in report.headline[:HEADLINE_MAX]), ""]
    for table in report.lead_tables:
        parts += table_section_markdown(table)
    groups = report.grouped()
    if groups:
        parts += ["## Findings", ""]
    for topic, found in groups.items():
        parts += [f"### {topic}", "", *(f"- {f}" for f in found), ""]
    if report.figures:
        parts += ["## Plots", ""]
    for fig in report.figures:
        parts += [
            f"### {fig.title}",
            "",
            f"![{fig.title}]({fig.file})",
            "",
            f"{fig.caption} [SVG]({fig.svg})",
            "",
        ]
    for table in report.tables:
        parts += table_section_markdown(table)
    if report.warnings:
        parts += ["## Warnings", "", *(f"- {w}" for w in report.warnings), ""]
    return "\n".join(parts)


def write(report: Report, out: Path) -> None:
    owned.write(out / "index.html", render_html(report))
    owned.write(out / "index.md", render_markdown(report))
