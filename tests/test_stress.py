"""Long reliability checks, run by `nox -s stress` (marked slow: not in the default run)."""

import json
import time

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


def test_two_hundred_tiny_runs_complete_without_growing_memory_or_handles(tmp_path):
    """One sweep of 200 in-process (simulated) runs. After each run, a Hydra callback in the
    sweeping process records its resident memory (VmRSS) and open file descriptors."""
    probe = tmp_path / "probe.csv"
    out = tmp_path / "res"
    t0 = time.monotonic()
    proc = run_subprocess(
        "run",
        "-m",
        *SMALL,
        "mode=simulated",
        "workers=2",
        "seed=range(0,200)",
        "train.max_steps=3",
        "timing.calibration_steps=0",
        f"results_dir={out}",
        "+hydra.callbacks.probe._target_=tests.probes.ResourceProbe",
        f"+hydra.callbacks.probe.out={probe}",
        timeout=1800,
    )
    wall_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in out.rglob("run.json")]
    assert len(recs) == 200 and {r["status"] for r in recs} == {"complete"}
    rows = [line.split(",") for line in probe.read_text().splitlines()]
    assert [int(r[0]) for r in rows] == list(range(200))
    rss = [int(r[2]) for r in rows]
    fds = [int(r[3]) for r in rows]
    print(
        f"\n200-run sweep in {wall_s:.0f}s: RSS after run 20 {rss[19] / 1024:.1f} MiB, "
        f"after run 200 {rss[-1] / 1024:.1f} MiB ({100 * (rss[-1] / rss[19] - 1):+.1f}%); "
        f"open fds after run 20 {fds[19]}, after run 200 {fds[-1]}"
    )
    assert abs(rss[-1] - rss[19]) <= 0.10 * rss[19]
    assert abs(fds[-1] - fds[19]) <= 0.10 * fds[19]
