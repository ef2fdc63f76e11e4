"""Headless Chromium opens every kind of report page from disk (a report, a comparison, the
reference report rebuilt from the committed results): every image loads, the headline is at
the top with at most five sentences, the findings are folded by topic, and a full-page
screenshot is saved to look at.

Run by `nox -s report_browser`; skipped when Chromium is not installed (Debian: `chromium`).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dpsuite.analysis.report.build import REFERENCE_RESULTS, build_report
from dpsuite.analysis.report.compare import build_compare
from tests import report_trees as trees
from tests.conftest import REPO
from tests.report_pages import html_images, png_size

pytestmark = pytest.mark.browser

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]
MAX_SHOT_HEIGHT = 30000  # pixels; a longer page is cut there
# A page that frames the report and writes what the browser made of every <img> into the DOM.
PROBE = """<!DOCTYPE html><html><body><pre id="result">pending</pre>
<iframe id="report" src="{src}" style="width:1200px;height:900px"></iframe>
<script>
const frame = document.getElementById("report");
frame.addEventListener("load", () => {{
  const out = document.getElementById("result");
  const doc = frame.contentDocument;
  if (!doc) {{ out.textContent = "RESULT " + JSON.stringify({{error: "no access"}}); return; }}
  const images = Array.from(doc.images);
  const loaded = i => i.complete ? null : new Promise(r => {{ i.onload = i.onerror = r; }});
  Promise.all(images.map(loaded)).then(() => {{
      const seen = images.map(i => ({{src: i.getAttribute("src"), width: i.naturalWidth}}));
      const headline = doc.querySelector("ul.headline");
      const first = doc.querySelector("h2");
      const top = headline && first ? Boolean(
        headline.compareDocumentPosition(first) & Node.DOCUMENT_POSITION_FOLLOWING) : null;
      out.textContent = "RESULT " + JSON.stringify({{
        title: doc.title,
        images: seen,
        headline: headline ? headline.querySelectorAll("li").length : 0,
        headline_first: top,
        topics: doc.querySelectorAll("details > summary").length,
        open_topics: doc.querySelectorAll("details[open]").length,
        wider_than_page: doc.documentElement.scrollWidth > frame.clientWidth,
        height: doc.documentElement.scrollHeight,
      }});
    }});
}});
</script></body></html>
"""


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def screenshot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: $DPSUITE_BROWSER_OUT (the nox session keeps them) or a temp dir."""
    out = Path(os.environ.get("DPSUITE_BROWSER_OUT", tmp_path / "shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def check_in_browser(report_dir: Path, tmp_path: Path, name: str) -> None:
    index = (report_dir / "index.html").resolve()
    probe = tmp_path / f"probe-{name}.html"
    probe.write_text(PROBE.format(src=index.as_uri()))
    proc = chromium(
        [
            "--allow-file-access-from-files",
            "--virtual-time-budget=15000",
            "--dump-dom",
            probe.as_uri(),
        ],
        tmp_path / f"profile-{name}",
    )
    match = re.search(r"RESULT (\{.*\})", html.unescape(proc.stdout))
    assert match, f"no result from Chromium (rc {proc.returncode}): {proc.stderr[-2000:]}"
    seen = json.loads(match.group(1))
    assert "error" not in seen, seen
    assert seen["title"].startswith("dpsuite")
    assert [i["src"] for i in seen["images"]] == html_images(report_dir)
    broken = [i["src"] for i in seen["images"] if i["width"] <= 0]
    assert not broken, f"images that did not load: {broken}"
    assert 1 <= seen["headline"] <= 5 and seen["headline_first"], seen
    assert seen["topics"] >= 1 and seen["open_topics"] == 0, "findings fold away by topic"
    assert not seen["wider_than_page"], "the page scrolls sideways"

    shot = screenshot_dir(tmp_path) / f"{name}.png"
    shot.unlink(missing_ok=True)
    height = min(int(seen["height"]) + 40, MAX_SHOT_HEIGHT)  # the whole page, to look at
    proc = chromium(
        [f"--screenshot={shot}", f"--window-size=1280,{height}", index.as_uri()],
        tmp_path / f"profile-shot-{name}",
    )
    assert shot.exists(), proc.stderr[-2000:]
    width, height = png_size(shot)
    assert width > 0 and height > 0


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: chromium)"
)


@needs_chromium
def test_synthetic_report_in_chromium(tmp_path):
    res = tmp_path / "mixed"
    trees.write_scaling(res, cores=4)
    trees.write_convergence(res)
    trees.write_comm_bench(res)
    trees.write_failures(res)
    written = build_report(res, tmp_path / "report")
    check_in_browser(written.out, tmp_path, "synthetic-report")


@needs_chromium
def test_comparison_in_chromium(tmp_path):
    a, b = tmp_path / "box-a", tmp_path / "box-b"
    trees.write_scaling(a, tag="box-a", host="host-a", cores=4, repeats=3)
    trees.write_comm_bench(a, tag="box-a", peak=4.0)
    trees.write_scaling(b, tag="box-b", host="host-b", speed=3.0, cores=4, repeats=3)
    trees.write_comm_bench(b, tag="box-b", peak=9.0)
    written = build_compare([a, b], tmp_path / "compare", fail_below=0.95)
    check_in_browser(written.out, tmp_path, "comparison")


@needs_chromium
@pytest.mark.skipif(
    not (REPO / REFERENCE_RESULTS).is_dir(), reason="no reference results committed"
)
def test_reference_report_in_chromium(tmp_path):
    """The reference report as this code writes it (the committed one may be older)."""
    written = build_report(REPO / REFERENCE_RESULTS, tmp_path / "reference")
    check_in_browser(written.out, tmp_path, "reference-report")
