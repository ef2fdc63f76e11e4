"""Every relative link of README.md and docs/*.md leads to a file that exists, and every
#anchor to a heading of the page it names (GitHub's heading ids). No network: web links are
not followed."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

HEADING = re.compile(r"^#{1,6} (.+?)\s*#*\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        lines.append("" if fenced else CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(0)[1:-1], heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The heading ids of a page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    ids = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def broken_links(page: Path) -> list[str]:
    """Each relative link of the page that does not resolve, with why."""
    text = "\n".join(prose_lines(page.read_text()))
    broken = []
    for target in LINK.findall(text):
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    assert broken_links(page) == []


def test_the_docs_pages_are_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name}" not in readme]
    assert unlinked == []


def test_a_missing_file_and_a_missing_anchor_are_found(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](other.md#a-code-heading) [self](#title) [web](https://x.invalid/y)\n"
        "[gone](missing.md) [bad anchor](other.md#nothing) [bad self](#none)\n"
        "```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)`\n"
    )
    assert broken_links(page) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#nothing: no heading #nothing in other.md",
        "#none: no heading #none in page.md",
    ]
