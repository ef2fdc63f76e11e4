"""The Scaling topic of `dpsuite report`: throughput, efficiency and the step-time breakdown per
series, repeats, oversubscription and the scaling table's columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

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


def record(run_dir: Path, threads: int | None = None, **top) -> None:
    """Record how a run was made: its threads per worker (run and fingerprint) and any other
    top-level key; none is part of the config its run id hashes."""
    rec = results.read_json(run_dir / "run.json")
    if threads is not None:
        rec["threads_per_worker"] = threads
        rec["hardware"]["threads_per_worker"] = threads
    rec.update(top)
    results.write_json_atomic(run_dir / "run.json", rec)


def test_a_series_that_mixes_threads_per_worker_is_refused(tmp_path):
    """1 worker at 2 threads (1,592 ms/step) against 2 workers at 1 thread (229 ms/step): no
    efficiency between them (it would read 695 %), and a finding says why."""
    for workers, threads, step_s in ((1, 2, 1.592), (2, 1, 0.229)):
        for repeat in range(3):
            tput = workers * trees.PER_WORKER / step_s * trees.REPEAT_SPREAD[repeat]
            run = trees.write_run(
                tmp_path / "res", workers=workers, repeat=repeat, samples_per_s=tput, epochs=1
            )
            record(run, threads=threads)
    written = build.build_report(tmp_path / "res", tmp_path / "rep")
    assert not any("scaling efficiency" in sentence for sentence in written.headline)
    assert data.scaling_table(data.load_tree(tmp_path / "res").runs).empty
    assert (
        "mnist1d_mlp · 32/worker: not one scaling series: its points ran with different "
        "resources per worker (1 worker: 2 threads/worker; 2 workers: 1 thread/worker), and "
        "efficiency compares only points with the same resources per worker: no two of its "
        "worker counts had the same, so no efficiency is given."
        in " ".join(findings_of(written.out))
    )


def test_a_mixed_series_is_split_into_fair_series(tmp_path):
    for threads in (1, 2):
        for workers in (1, 2, 4):
            run = trees.write_run(
                tmp_path,
                workers=workers,
                samples_per_s=800.0 * workers * threads,
                epochs=1,
                seed=threads,
            )
            record(run, threads=threads)
    scaling = data.scaling_table(data.load_tree(tmp_path).runs)
    assert sorted(set(scaling["series"])) == [
        "mnist1d_mlp · 32/worker · 1 thread/worker",
        "mnist1d_mlp · 32/worker · 2 threads/worker",
    ]
    assert scaling["efficiency"].round(6).eq(1.0).all()
    (finding,) = data.mixed_resources(data.load_tree(tmp_path).runs)
    assert (
        "it is split into fair series, one per resources (1 thread/worker, 2 threads/worker)"
        in (finding)
    )


def test_workers_sharing_a_gpu_are_not_in_the_series_of_one_gpu_each(tmp_path):
    for workers in (1, 2, 4):
        run = trees.write_run(tmp_path, workers=workers, samples_per_s=900.0 * workers, epochs=1)
        rec = results.read_json(run / "run.json")
        rec["device"] = "cuda"
        rec["hardware"].update(accelerator_count=2, workers_per_host=workers)
        results.write_json_atomic(run / "run.json", rec)
    resources = data.scaling_runs(data.load_tree(tmp_path).runs).set_index("workers")["resources"]
    assert resources.to_dict() == {1: "1 GPU/worker", 2: "1 GPU/worker", 4: "2 workers/GPU"}
    assert list(data.scaling_table(data.load_tree(tmp_path).runs)["workers"]) == [1, 2]


def test_superlinear_efficiency_beyond_its_interval_is_invalid_and_never_the_headline(tmp_path):
    """Same threads everywhere, but the 1-worker baseline was slowed: 2 workers measure 7× its
    throughput, with repeats that agree. The series is invalid; the headline picks the valid one."""
    root = tmp_path / "res"
    for workers, tput in ((1, 20.0), (2, 280.0), (4, 300.0)):
        for repeat, spread in enumerate(trees.REPEAT_SPREAD):
            trees.write_run(
                root,
                workers=workers,
                repeat=repeat,
                samples_per_s=tput * spread,
                workload="resnet18",
                epochs=1,
            )
    trees.write_scaling(root)
    scaling = data.scaling_table(data.load_tree(tmp_path / "res").runs)
    bad = scaling[scaling["workload"] == "resnet18"]
    assert (bad["efficiency_low"].dropna() > 1).all() and bad["invalid"].astype(bool).all()
    assert not scaling[scaling["workload"] == "mnist1d_mlp"]["invalid"].astype(bool).any()
    written = build.build_report(tmp_path / "res", tmp_path / "rep")
    limit = next(s for s in written.headline if "scaling efficiency" in s)
    assert "resnet18" not in limit and "mnist1d_mlp" in limit
    found = findings_of(written.out)
    invalid = next(f for f in found if f.startswith("resnet18 · 32/worker: invalid"))
    assert "at 2 workers its efficiency is 700 %, 95 % interval" in invalid
    assert "the 1-worker baseline ran slower per worker (20 samples/s per worker) than 2" in invalid
    assert not any(f.startswith("resnet18 · 32/worker: largest worker count") for f in found)


def test_a_run_that_counts_more_samples_than_it_had_is_invalid(tmp_path):
    """The 4-worker run claims 30 steps × 128 samples from 1,600 training samples in one epoch."""
    for workers in (1, 2, 4):
        run = trees.write_run(tmp_path, workers=workers, samples_per_s=900.0 * workers, epochs=1)
        per_epoch = 50 // workers if workers < 4 else 30
        record(run, train_samples=1600, steps_per_epoch=per_epoch)
        rec = results.read_json(run / "run.json")
        rec["metrics"]["steps"] = per_epoch  # one epoch
        results.write_json_atomic(run / "run.json", rec)
    scaling = data.scaling_table(data.load_tree(tmp_path).runs).set_index("workers")
    assert scaling.loc[4, "invalid"] == (
        "at 4 workers a run counted 30 steps × global batch 128 = 3,840 samples, more than the "
        "1,600 training samples of the 1 epoch(s) those steps cover"
    )
    assert scaling.loc[[1, 2], "invalid"].eq("").all()
    written = build.build_report(tmp_path, tmp_path / "rep")
    assert "At 2 workers" in next(s for s in written.headline if "scaling efficiency" in s)


def test_a_narrow_log_axis_never_repeats_a_tick_label():
    """gpt2 on a CPU: 5.6 to 6.9 samples/s, less than a decade: ticks 5.6, 5.8, ... were all
    labelled "6"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpsuite.analysis.report.plots import plain_log_axis

    for low, high in ((5.6, 6.9), (40.0, 42.0), (0.0521, 0.0524), (20.0, 30000.0)):
        fig = Figure()
        ax = fig.subplots()
        ax.plot([1, 2], [low, high])
        plain_log_axis(ax, "y")
        FigureCanvasAgg(fig).draw()
        bottom, top = ax.get_ylim()
        shown = [t for t in ax.get_yticklabels() if bottom <= t.get_position()[1] <= top]
        labels = [t.get_text() for t in shown]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
        for tick in shown:  # each label reads as the value it marks
            assert float(tick.get_text().replace(",", "")) == pytest.approx(
                tick.get_position()[1], rel=1e-3
            )
    assert labels[:3] == ["20", "30", "50"]  # whole numbers stay whole
