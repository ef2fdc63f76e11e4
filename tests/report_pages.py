"""Reading a written report back as a reader sees it: its images (PNG beside SVG, one per plot
shown), its findings by topic and its headline, from index.html and index.md."""

from __future__ import annotations

import struct
from html.parser import HTMLParser
from pathlib import Path

SCALING_PLOTS = {"throughput.png", "efficiency.png", "step_time_breakdown.png"}


CONVERGENCE_PLOTS = {"accuracy_vs_batch.png", "training_curves.png", "lr_schedule.png"}


TARGET_PLOTS = {"steps_to_target.png", "rule_efficiency.png"}


NOISE_SCALE_PLOTS = {"gradient_noise_scale.png", "critical_batch.png", "b_crit_by_target.png"}


TIME_PLOT = {"time_to_target.png"}  # with scaling runs of the same workload on the machine


COMM_PLOT = {"allreduce_bandwidth.png"}


SYNC_PLOTS = {"sync_throughput.png", "sync_bytes.png", "sync_tradeoff.png"}


class ImageSources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def html_images(report_dir: Path) -> list[str]:
    parser = ImageSources()
    parser.feed((report_dir / "index.html").read_text())
    return parser.sources


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header (signature, then the IHDR chunk)."""
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", blob[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", blob[16:24])


def topics_of(report_dir: Path) -> dict[str, list[str]]:
    """The findings of index.md by topic (### headings under ## Findings)."""
    md = (report_dir / "index.md").read_text()
    if "## Findings\n" not in md:
        return {}
    section = md.split("## Findings\n", 1)[1].split("\n## ", 1)[0]
    topics: dict[str, list[str]] = {}
    for block in section.split("### ")[1:]:
        title, _, body = block.partition("\n")
        topics[title] = [line[2:] for line in body.splitlines() if line.startswith("- ")]
    return topics


def findings_of(report_dir: Path) -> list[str]:
    return [f for found in topics_of(report_dir).values() for f in found]


def headline_of(report_dir: Path) -> list[str]:
    """The bold bullets between the title block and the first section of index.md."""
    md = (report_dir / "index.md").read_text()
    top = md.split("\n## ", 1)[0]
    return [line[4:-2] for line in top.splitlines() if line.startswith("- **")]


def report(dpsuite, capsys, results_dir: Path, out: Path) -> tuple[Path, str]:
    assert dpsuite("report", str(results_dir), "--out", str(out)) == 0
    return out, capsys.readouterr().err


def assert_valid_images(report_dir: Path) -> set[str]:
    sources = html_images(report_dir)
    assert sources, "the report shows no plot"
    for src in sources:
        assert not Path(src).is_absolute() and "/" not in src, "images sit beside index.html"
        width, height = png_size(report_dir / src)
        assert width > 100 and height > 100
    md = (report_dir / "index.md").read_text()
    assert all(f"]({src})" in md for src in sources)
    assert {p.name for p in report_dir.glob("*.png")} == set(sources), "one PNG per plot"
    svgs = {p.stem for p in report_dir.glob("*.svg")}
    assert svgs == {Path(src).stem for src in sources}, "an SVG beside every PNG"
    for svg in report_dir.glob("*.svg"):
        assert svg.read_text().lstrip().startswith("<?xml") and "</svg>" in svg.read_text()
    return set(sources)
