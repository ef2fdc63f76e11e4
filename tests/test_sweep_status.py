"""A sweep knows its runs' statuses from their own run.json files, and only from those."""

from __future__ import annotations

import json

from dpsuite.sweep.hydra_app import SubmittedJob
from dpsuite.sweep.runner import Sweep
from tests.conftest import SMALL

SWEEP = ["mode=simulated", "workers=1,2", *SMALL, "train.max_steps=5"]


def test_an_earlier_attempts_record_never_counts_for_this_sweep(dpsuite, tmp_path):
    args = [*SWEEP, f"results_dir={tmp_path}"]
    assert dpsuite("run", "-m", *args) == 0
    again = Sweep.checked(None, [*args, "force=true"])
    again.mark_existing()
    again.refresh()
    # Both run.json files say complete, but from the earlier sweep: nothing ran in this one yet.
    assert set(again.runs.values()) == {"pending"}
    again.settle("interrupted")
    assert again.counts() == {"not run": 2}


def test_summary_manifest_and_exit_code_follow_the_run_json_files(dpsuite, tmp_path, capsys):
    args = [*SWEEP, "workload.base_lr=0.05,1e6", "lr_rule=linear", f"results_dir={tmp_path}"]
    assert dpsuite("run", "-m", *args) == 0  # a diverged run is a result, not a failure
    out = capsys.readouterr().out
    records = [json.loads(p.read_text()) for p in tmp_path.glob("*/run.json")]
    statuses = sorted(r["status"] for r in records)
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    assert sorted(manifest["runs"].values()) == statuses
    assert manifest["counts"] == {s: statuses.count(s) for s in set(statuses)}
    assert "diverged" in statuses and f"sweep multirun finished: {len(records)} runs" in out
    for r in records:
        assert f"{r['run_id']}: {r['status']}" in out  # progress, as each run.json said


def test_a_job_that_starts_and_ends_between_two_looks_still_says_where_it_ran(
    dpsuite, tmp_path, capsys
):
    """A SLURM sweep polls run.json; a short run can go from pending to complete between two
    polls. Its `running on HOST (job ID)` line is said all the same, before its final line."""
    args = [*SWEEP, f"results_dir={tmp_path}"]
    assert dpsuite("run", "-m", *args) == 0
    again = Sweep.checked(None, [*args, "force=true"])
    again.mark_existing()
    run_id = next(iter(again.runs))
    again.jobs_submitted({run_id: SubmittedJob("7_0", tmp_path / "7_0.out", tmp_path / "7_0.err")})
    path = again.run_dirs[run_id] / "run.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "host": "node7", "finished_at": "now"}))
    capsys.readouterr()
    again.refresh()
    lines = capsys.readouterr().out.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith(f"{run_id}: ")]
    assert [lines[i] for i in said][0] == f"{run_id}: running on node7 (job 7_0)"
    assert lines[said[1]].startswith(f"{run_id}: complete") and "(job 7_0)" in lines[said[1]]


def test_a_second_sweep_keeps_the_first_ones_record(dpsuite, tmp_path):
    """Rerunning (or running another sweep) into a results_dir moves the earlier sweep.json
    aside: its overrides, grid, runs and statuses stay on record."""
    args = [*SWEEP, f"results_dir={tmp_path}"]
    assert dpsuite("run", "-m", *args) == 0
    first = json.loads((tmp_path / "sweep.json").read_text())
    assert dpsuite("run", "-m", *args, "force=true") == 0
    second = json.loads((tmp_path / "sweep.json").read_text())
    [kept] = tmp_path.glob("sweep-*.json")
    assert json.loads(kept.read_text()) == first
    assert second["overrides"] == [*args, "force=true"] and first["overrides"] == args
    stamp = first["started_at"][:19].replace("-", "").replace(":", "")
    assert kept.name == f"sweep-{stamp}Z.json"
    assert dpsuite("run", "-m", *args) == 0  # a third: two kept, whatever their starts
    assert len(list(tmp_path.glob("sweep-*.json"))) == 2
