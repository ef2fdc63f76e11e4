"""The Scaling topic of `dpsuite report`: throughput, efficiency and the step-time breakdown per
series, repeats, oversubscription and the scaling table's columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.report import build, data
from dpsuite.analysis.report.sections.scaling import (
    communication_findings,
    step_time_breakdown,
    throughput_vs_workers,
)
from tests import report_trees as trees
from tests.report_expected import (
    expected_scaling_findings,
    expected_scaling_headline,
)
from tests.report_pages import (
    COMM_PLOT,
    SCALING_PLOTS,
    assert_valid_images,
    findings_of,
    report,
)


def test_scaling_only(dpsuite, capsys, scaling_tree, tmp_path):
    out, err = report(dpsuite, capsys, scaling_tree, tmp_path / "rep")
    assert err == ""
    assert assert_valid_images(out) == SCALING_PLOTS | COMM_PLOT
    found = findings_of(out)
    for sentence in expected_scaling_findings():
        assert sentence in found
    assert (
        "box-a, 2 ranks (gloo): peak all-reduce bus bandwidth 3.94 GB/s at 16 MiB messages."
        in found
    )
    assert not any("batch-32 accuracy" in f for f in found)
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == len(trees.THROUGHPUT)
    assert list(summary["workers"]) == sorted(trees.THROUGHPUT)  # run ids sort by worker count
    typed = pd.read_parquet(out / "summary.parquet")  # the same rows, beside it
    assert list(typed["run_id"]) == list(summary["run_id"])
    assert typed["samples_per_s"].tolist() == pytest.approx(summary["samples_per_s"].tolist())


def test_without_timing_breakdown_the_plot_is_left_out(dpsuite, capsys, tmp_path):
    trees.write_scaling(tmp_path / "res", timing=False)
    out, _ = report(dpsuite, capsys, tmp_path / "res", tmp_path / "rep")
    assert assert_valid_images(out) == {"throughput.png", "efficiency.png"}
    assert not any("exposed communication" in f for f in findings_of(out))


def test_simulated_scaling_runs_are_not_a_scaling_series():
    frame = pd.DataFrame(
        {
            "machine": "m",
            "workload": "w",
            "per_worker_batch": 32,
            "precision": "fp32",
            "device": "cpu",
            "workers": [1, 2, 1, 2],
            "mode": ["simulated", "simulated", "ddp", "ddp"],
            "status": ["complete", "complete", "complete", "failed"],
            "samples_per_s": [100.0, 150.0, 100.0, None],
            "step_time_s": 0.1,
            "compute_time_s": None,
            "comm_time_s": None,
            "exposed_comm_s": None,
        }
    )
    assert data.scaling_table(frame).empty


@pytest.fixture(scope="module")
def crowded_tree(tmp_path_factory) -> Path:
    """A scaling sweep on a 4-core machine: the 8-worker point is oversubscribed."""
    root = tmp_path_factory.mktemp("crowded")
    trees.write_scaling(root, cores=4)
    return root


def test_oversubscribed_points_are_marked(crowded_tree, tmp_path):

    scaling = data.scaling_table(data.load_tree(crowded_tree).runs)
    assert list(scaling["oversubscribed"]) == [False, False, False, True]
    figure = throughput_vs_workers(scaling)
    hollow = [
        list(line.get_xdata())
        for line in figure.axes[0].lines
        if line.get_markerfacecolor() == "white" and len(line.get_xdata())
    ]
    assert hollow == [[8]], "the oversubscribed point, and only it, is drawn hollow"
    bars = step_time_breakdown(scaling).axes[0].patches
    assert sum(bar.get_hatch() == "//" for bar in bars) == 3  # compute, exposed, rest at N=8

    written = build.build_report(crowded_tree, tmp_path / "rep")
    assert (
        expected_scaling_headline(
            4,
            "; runs at 8 workers had more worker threads than cores (oversubscribed, drawn "
            "hollow) and measure contention",
        )
        in written.headline
    )
    md = (written.out / "index.md").read_text()
    table = md.split("\n## Scaling\n\n", 1)[1].split("\n\n", 2)[1].splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    marks = [[c.strip() for c in row.strip("|").split("|")][-1] for row in table[2:]]
    assert header[-1] == "oversubscribed" and marks == ["", "", "", "yes"]


def test_the_wait_for_the_slowest_rank_is_drawn_and_said_apart_from_communication(crowded_tree):
    scaling = data.scaling_table(data.load_tree(crowded_tree).runs)
    row = scaling.iloc[1]
    # A step whose exposed time is more than its whole all-reduce, with a measured wait.
    scaling.loc[scaling.index[1], ["comm_time_s", "exposed_comm_s"]] = [0.001, 0.002]
    scaling["straggler_wait_s"] = 0.0005
    labels = [bar.get_label() for bar in step_time_breakdown(scaling).axes[0].containers]
    assert "waiting for slowest rank" in labels and "compute (typical rank)" in labels
    sentence = communication_findings("w", scaling.iloc[:2])[0]
    assert f"at {int(row['workers'])} workers" in sentence
    assert "waiting for the slowest rank adds 0.50 ms more" in sentence
    assert (
        "more than the whole 1.00 ms all-reduce, so 1.00 ms of it is not the all-reduce" in sentence
    )
    assert "hidden" not in sentence


def test_efficiency_is_relative_to_the_smallest_worker_count(tmp_path):
    for workers, tput in ((2, 1000.0), (4, 1800.0)):
        trees.write_run(tmp_path, workers=workers, samples_per_s=tput)
    table = data.scaling_table(data.load_tree(tmp_path).runs)
    assert list(table["base_workers"]) == [2, 2]
    assert list(table["efficiency"].round(6)) == [1.0, 0.9]


def test_repeats_give_each_scaling_point_a_median_and_an_interval(repeated_machines):
    from dpsuite.analysis.report import stats

    scaling = data.scaling_table(data.load_tree(repeated_machines[0]).runs)
    assert list(scaling["runs"]) == [3, 3]
    assert list(scaling["samples_per_s"]) == [1000.0, 1900.0]  # medians of the repeats
    two = scaling[scaling["workers"] == 2].iloc[0]
    assert (two["samples_per_s_low"], two["samples_per_s_high"]) == stats.median_ci(
        trees.REPEATED_A[2]
    )
    assert 1850.0 <= two["samples_per_s_low"] < 1900.0 < two["samples_per_s_high"] <= 1950.0
    assert two["efficiency"] == pytest.approx(1900.0 / 2000.0)


def test_model_flops_mfu_tokens_and_memory_are_in_the_scaling_table(dpsuite, capsys, tmp_path):
    root = tmp_path / "res"
    trees.write_scaling(root)
    for run_json in root.rglob("run.json"):
        rec = results.read_json(run_json)
        rec["metrics"].update(
            tokens_per_s=64 * rec["metrics"]["samples_per_s"],
            model_tflops_per_device=0.5,
            mfu=0.25,
            peak_rss_mib=420.0,
        )
        results.write_json_atomic(run_json, rec)
    out, _ = report(dpsuite, capsys, root, tmp_path / "rep")
    md = (out / "index.md").read_text()
    header = next(line for line in md.splitlines() if "efficiency_pct" in line)
    for column in ("tokens_per_s", "model_TFLOP/s_per_device", "MFU_pct", "peak_RSS_MiB"):
        assert column in header
    assert "| 25 |" in md or "| 25.0 |" in md  # MFU as a percentage


def test_columns_the_runs_lack_are_not_in_the_scaling_table(
    dpsuite, capsys, scaling_tree, tmp_path
):
    out, _ = report(dpsuite, capsys, scaling_tree, tmp_path / "rep")
    assert "MFU_pct" not in (out / "index.md").read_text()
