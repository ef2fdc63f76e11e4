"""A sweep knows its runs' statuses from their own run.json files, and only from those."""

from __future__ import annotations

import json

from suite.sweep.runner import Sweep
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
