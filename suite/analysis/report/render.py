"""Write a report as HTML (opens from disk, images beside it) and Markdown, from one model."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } .meta { color: #555; margin-top: 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.92em; margin-top: 0.3em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
code { background: #f4f4f4; padding: 0 3px; border-radius: 3px; }
.warnings li { color: #8a5300; }
"""


@dataclass
class Figure:
    file: str  # PNG name, relative to the report directory
    title: str
    caption: str


@dataclass
class Table:
    title: str
    frame: pd.DataFrame
    note: str = ""


@dataclass
class Report:
    title: str
    meta: list[str]  # lines under the title: source, machines, run counts
    findings: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def inline_html(text: str) -> str:
    """Escape, then turn `name` into <code>name</code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def table_html(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell_text(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def cell_text(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
        *(f'<p class="meta">{inline_html(line)}</p>' for line in report.meta),
    ]
    if report.findings:
        parts.append("<h2>Findings</h2><ul>")
        parts += [f"<li>{inline_html(f)}</li>" for f in report.findings]
        parts.append("</ul>")
    if report.figures:
        parts.append("<h2>Plots</h2>")
    for fig in report.figures:
        src = html.escape(fig.file, quote=True)
        parts.append(
            f'<figure id="{html.escape(Path(fig.file).stem)}"><h3>{inline_html(fig.title)}</h3>'
            f'<img src="{src}" alt="{html.escape(fig.title, quote=True)}">'
            f"<figcaption>{inline_html(fig.caption)}</figcaption></figure>"
        )
    for table in report.tables:
        parts.append(f"<h2>{html.escape(table.title)}</h2>")
        if table.note:
            parts.append(f"<p>{inline_html(table.note)}</p>")
        parts.append(table_html(table.frame))
    if report.warnings:
        parts.append('<h2>Warnings</h2><ul class="warnings">')
        parts += [f"<li>{html.escape(w)}</li>" for w in report.warnings]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


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


def render_markdown(report: Report) -> str:
    parts = [f"# {report.title}", "", *(f"{line}  " for line in report.meta), ""]
    if report.findings:
        parts += ["## Findings", "", *(f"- {f}" for f in report.findings), ""]
    if report.figures:
        parts += ["## Plots", ""]
    for fig in report.figures:
        parts += [f"### {fig.title}", "", f"![{fig.title}]({fig.file})", "", fig.caption, ""]
    for table in report.tables:
        parts += [f"## {table.title}", ""]
        if table.note:
            parts += [table.note, ""]
        parts += [table_markdown(table.frame), ""]
    if report.warnings:
        parts += ["## Warnings", "", *(f"- {w}" for w in report.warnings), ""]
    return "\n".join(parts)


def write(report: Report, out: Path) -> None:
    (out / "index.html").write_text(render_html(report))
    (out / "index.md").write_text(render_markdown(report))
