"""How a sweep on the test SLURM compares with the same sweep run here (`nox -s cluster_bench`).

Prints, with the SLURM launcher's defaults (a look at the jobs every `poll_s` = 5 s):

* the wall time of a 2-run sweep (workers=1,2, 20 steps each) run locally and on SLURM;
* the time from a job's training process killed (SIGKILL) to its run marked failed in run.json.

Needs the cluster up (tests/cluster/slurm.sh start) and SLURM_CONF set (`slurm.sh env`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = ["workload.num_samples=2000", "train.max_steps=20", "workers=1,2"]


def dpsuite(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dpsuite", "run", "-m", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def timed_sweep(*args: str) -> float:
    t0 = time.monotonic()
    code = dpsuite(*args).wait()
    if code != 0:
        raise SystemExit(f"sweep failed (exit {code}): {' '.join(args)}")
    return time.monotonic() - t0


def status(out: Path) -> dict | None:
    for path in out.glob("*/run.json"):
        try:
            return json.loads(path.read_text())
        except ValueError:
            return None
    return None


def kill_to_failed_s(out: Path) -> float:
    """Start a long run on SLURM, SIGKILL its process, time until run.json says failed."""
    long_run = ["workload.num_samples=2000", "train.max_steps=10000000"]
    proc = dpsuite("hydra/launcher=slurm", *long_run, f"results_dir={out}")
    try:
        while (rec := status(out)) is None or rec["status"] != "running":
            time.sleep(0.1)
        os.kill(rec["pid"], signal.SIGKILL)
        t_kill = time.monotonic()
        while status(out)["status"] != "failed":
            time.sleep(0.1)
        return time.monotonic() - t_kill
    finally:
        proc.wait(timeout=120)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dpsuite-measure-", dir=os.environ.get("TMPDIR")) as d:
        tmp = Path(d)
        local = timed_sweep(*TINY, f"results_dir={tmp / 'local'}")
        on_slurm = timed_sweep("hydra/launcher=slurm", *TINY, f"results_dir={tmp / 'slurm'}")
        detect = kill_to_failed_s(tmp / "killed")
    print(f"2-run sweep (workers=1,2, 20 steps): local {local:.1f} s, SLURM {on_slurm:.1f} s")
    print(f"job killed -> its run marked failed: {detect:.1f} s (poll_s=5)")


if __name__ == "__main__":
    main()
