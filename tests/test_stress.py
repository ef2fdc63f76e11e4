"""Long reliability checks, run by `nox -s stress` (marked slow: not in the default run)."""

import json

import pytest

from tests.conftest import SMALL, run_subprocess

pytestmark = [pytest.mark.slow, pytest.mark.multiproc]


def test_twenty_back_to_back_two_worker_runs_all_complete(tmp_path):
    """Each run is a fresh launcher process, as a user would start it; none may fail at teardown."""
    statuses = []
    for seed in range(20):
        proc = run_subprocess(
            "run",
            *SMALL,
            "workers=2",
            "train.max_steps=40",
            f"seed={seed}",
            f"results_dir={tmp_path}",
        )
        assert "terminate called" not in proc.stderr, proc.stderr
        assert proc.returncode == 0, proc.stderr
        statuses.append(proc.returncode)
    recs = [json.loads(p.read_text()) for p in tmp_path.rglob("run.json")]
    assert len(recs) == 20 and {r["status"] for r in recs} == {"complete"}
