"""Headless Chromium opens a report from disk: every image loads, and a screenshot is saved.

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

from suite.analysis.report.build import REFERENCE_REPORT, build_report
from tests import report_trees as trees
from tests.conftest import REPO
from tests.test_report import html_images, png_size

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
      out.textContent = "RESULT " + JSON.stringify({{title: doc.title, images: seen}});
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

    shot = screenshot_dir(tmp_path) / f"{name}.png"
    shot.unlink(missing_ok=True)
    proc = chromium(
        [f"--screenshot={shot}", "--window-size=1280,4000", index.as_uri()],
        tmp_path / f"profile-shot-{name}",
    )
    assert shot.exists(), proc.stderr[-2000:]
    width, height = png_size(shot)
    assert width > 0 and height > 0


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: chromium)")
def test_synthetic_report_in_chromium(tmp_path):
    res = tmp_path / "mixed"
    trees.write_scaling(res)
    trees.write_convergence(res)
    trees.write_comm_bench(res)
    trees.write_failures(res)
    written = build_report(res, tmp_path / "report")
    check_in_browser(written.out, tmp_path, "synthetic-report")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: chromium)")
@pytest.mark.skipif(
    not (REPO / REFERENCE_REPORT / "index.html").exists(), reason="no reference report committed"
)
def test_reference_report_in_chromium(tmp_path):
    check_in_browser(REPO / REFERENCE_REPORT, tmp_path, "reference-report")
