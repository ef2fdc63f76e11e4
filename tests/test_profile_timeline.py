"""Where a step's time goes: torch.profiler traces per rank (profile.steps) and each rank's own
step times (steps_by_rank.csv) with the report's per-rank timeline."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.report import data, studies
from dpsuite.analysis.report.sections import rank_timeline
from dpsuite.measure.rank_timeline import timeline_rows
from tests import report_trees as trees
from tests.conftest import SMALL, only_run, read_run

# (step_time_s, data_wait_s, comm_s, comm_wait_s) of steps 10 and 20: rank 1 computes longer,
# so rank 0 waits for it inside the all-reduce.
RANK0 = [[0.010, 0.001, 0.006, 0.005], [0.011, 0.001, 0.007, 0.006]]
RANK1 = [[0.010, 0.001, 0.002, 0.001], [0.011, 0.001, 0.002, 0.001]]


def test_each_rank_gets_its_own_parts_and_the_slow_rank_waits_least():
    rows = timeline_rows([10, 20], [RANK0, RANK1])
    assert [(r["step"], r["rank"]) for r in rows] == [(10, 0), (10, 1), (20, 0), (20, 1)]
    r0, r1 = rows[0], rows[1]
    assert r1["peer_wait_s"] == 0.0 and r0["peer_wait_s"] == pytest.approx(0.004)
    assert r1["compute_s"] == pytest.approx(0.008) and r0["compute_s"] == pytest.approx(0.004)
    for r in rows:
        assert r["compute_s"] + r["data_wait_s"] + r["comm_wait_s"] == pytest.approx(
            r["step_time_s"]
        )


def test_an_unsampled_step_has_no_compute_or_peer_wait():
    nan = float("nan")
    [row, _] = timeline_rows([3], [[[0.01, 0.0, nan, nan]], [[0.01, 0.0, nan, nan]]])
    assert row["compute_s"] is None and row["peer_wait_s"] is None


def identity(**profile) -> dict:
    config = {"workload": {"name": "w"}, "timing": {"warmup_steps": 5, "max_rank_steps": 200}}
    if profile:
        config["profile"] = profile
    return results.run_identity(config, 2, 64)


def test_profiling_is_in_the_run_id_only_when_on_and_the_rank_sample_never_is():
    assert identity() == identity(steps=0, start=None)  # runs from before keep their ids
    assert identity(steps=3, start=None) != identity()  # profiled steps run slower
    assert "max_rank_steps" not in identity()["timing"]


def write_rank_steps(run_dir: Path, slow_rank: int, ranks: int = 4) -> None:
    parts = []
    for rank in range(ranks):
        slow = rank == slow_rank
        parts.append([[0.010, 0.0005, 0.003, 0.001 if slow else 0.004]] * 3)
    rows = timeline_rows([5, 6, 7], parts)
    pd.DataFrame(rows).to_csv(run_dir / "steps_by_rank.csv", index=False)


@pytest.fixture(scope="module")
def scaling_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scaling")
    trees.write_scaling(root)
    return root


def test_the_report_names_the_slow_rank_and_draws_every_rank(scaling_root, tmp_path):
    context = studies.context(data.load_tree(scaling_root))
    assert context.tree.rank_steps == {}
    before = rank_timeline.section(context)
    assert not (before.findings or before.plots or before.tables)  # older runs: as before
    run_dir = next(p.parent for p in scaling_root.rglob("run.json") if "-w4-" in str(p))
    write_rank_steps(run_dir, slow_rank=2)
    try:
        part = rank_timeline.section(studies.context(data.load_tree(scaling_root)))
    finally:
        (run_dir / "steps_by_rank.csv").unlink()
    [finding] = part.findings
    assert "rank 2 is the slowest" in finding and "wait 3.00 ms a step" in finding
    [table] = part.tables
    assert list(table.frame["rank"]) == [0, 1, 2, 3]
    figure = part.plots[0].draw()
    assert len(figure.axes[0].patches) == 4 * len(rank_timeline.PARTS)


@pytest.mark.multiproc
def test_a_profiled_two_rank_run_writes_a_trace_per_rank_and_each_ranks_steps(dpsuite, tmp_path):
    args = [*SMALL, "workers=2", "threads_per_worker=1", "train.epochs=1", "profile.steps=2"]
    assert dpsuite("run", *args, "timing.comm_hook=true", f"results_dir={tmp_path}") == 0
    run = only_run(tmp_path)
    rec = read_run(run)
    assert rec["config"]["profile"] == {"steps": 2, "start": None}
    assert rec["metrics"]["profiled_steps"] == "5-6" and rec["metrics"]["profile_dir"] == "profile"
    traces = sorted((run / "profile").glob("*.pt.trace.json"))
    assert [t.name.split(".")[0] for t in traces] == ["rank0", "rank1"]
    for trace in traces:
        names = {e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]}
        comm = {n for n in names if "all_reduce" in n or "allreduce" in n}
        assert comm & {"gloo:all_reduce", "c10d::allreduce_", "record_param_comms"}, comm
        assert any(n.startswith("autograd::engine::evaluate_function") for n in names)
        assert {"ProfilerStep#1", "ProfilerStep#2"} <= names  # the recorded steps, warm-up out
    by_rank = pd.read_csv(run / "steps_by_rank.csv")
    assert list(by_rank.columns) == results.schema.names(results.schema.STEPS_BY_RANK)
    assert set(by_rank["rank"]) == {0, 1}
    assert len(by_rank) == 2 * rec["metrics"]["timed_steps"]  # the hook samples every step
    assert (by_rank.groupby("step")["peer_wait_s"].min() == 0).all()


@pytest.mark.multiproc
def test_ddp_timers_read_on_every_step_keep_every_sample(dpsuite, tmp_path):
    """timing.comm_every=1: each step's sample is read as the next step ends; none of them
    may be taken for another step's and dropped (all were, before)."""
    args = [*SMALL, "workers=2", "threads_per_worker=1", "train.epochs=1", "timing.comm_every=1"]
    assert dpsuite("run", *args, f"results_dir={tmp_path}") == 0
    run = only_run(tmp_path)
    m = read_run(run)["metrics"]
    assert m["comm_timing"] == "ddp_reducer" and m["comm_samples_rejected"] == 0
    assert m["comm_sampled_steps"] == m["timed_steps"] - 1  # the last step's is never read
    by_rank = pd.read_csv(run / "steps_by_rank.csv")
    assert len(by_rank) == 2 * m["comm_sampled_steps"] and by_rank["compute_s"].notna().all()
