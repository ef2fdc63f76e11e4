"""The All-reduce topic of `dpsuite report`: comm-bench bandwidth per collective, its plot and
the bandwidth headline."""

from __future__ import annotations

from dpsuite.analysis.report import build, data
from dpsuite.analysis.report.sections.comm import allreduce_bandwidth, with_traffic
from tests import report_trees as trees
from tests.report_pages import (
    findings_of,
)


def test_other_collectives_are_plotted_and_found_but_leave_the_all_reduce_headline(tmp_path):
    root = tmp_path / "res"
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    trees.write_comm_bench(root, peak=9.0, collective="all_gather")
    trees.write_comm_bench(root, peak=2.0, collective="broadcast")
    written = build.build_report(root, tmp_path / "rep")
    assert (
        "All-reduce bus bandwidth (2 ranks, gloo) peaks at 3.94 GB/s with 16 MiB messages."
        in written.headline
    )
    text = (tmp_path / "rep" / "index.md").read_text()
    assert "peak all-reduce bus bandwidth 3.94 GB/s" in text
    assert "peak all-gather bus bandwidth 8.86 GB/s" in text
    assert "peak broadcast bus bandwidth 1.97 GB/s" in text
    assert "Collective bandwidth vs message size" in text
    comm = data.load_tree(root).comm
    fig = allreduce_bandwidth(comm)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == [
        f"{name} · box-a · 2 ranks · gloo" for name in ("all_reduce", "all_gather", "broadcast")
    ]
    assert len({line.get_color() for line in fig.axes[0].get_lines()}) == 3


def test_a_one_rank_benchmark_checks_the_path_but_shows_no_bandwidth(tmp_path):
    """One GPU's comm-bench (busbw is 0 by definition) is named as a check, not as a peak of
    0 GB/s, and neither draws a line nor becomes the bandwidth headline."""
    root = tmp_path / "res"
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    trees.write_comm_bench(root, tag="gpu-1", peak=400.0, world=1)
    written = build.build_report(root, tmp_path / "rep")
    assert "All-reduce bus bandwidth (2 ranks, gloo) peaks at 3.94 GB/s" in " ".join(
        written.headline
    )
    found = findings_of(tmp_path / "rep")
    one = [f for f in found if f.startswith("gpu-1")]
    assert one == [
        "gpu-1, 1 rank (gloo): the all-reduce ran and was checked at 8 message sizes (0 wrong), "
        "fastest 0.7 µs; bus bandwidth needs 2 or more ranks."  # 1 KiB at 1.56 GB/s
    ]
    comm = with_traffic(data.load_tree(root).comm)
    fig = allreduce_bandwidth(comm)
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["box-a · 2 ranks · gloo"]
    alone = tmp_path / "alone"
    trees.write_scaling(alone)
    trees.write_comm_bench(alone, tag="gpu-1", peak=400.0, world=1)
    written = build.build_report(alone, tmp_path / "rep-alone")
    assert "bus bandwidth" not in " ".join(written.headline).replace("needs", "")
    assert not (tmp_path / "rep-alone" / "allreduce_bandwidth.png").exists()
