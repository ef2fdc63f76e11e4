"""A sweep submitted as one SLURM batch job and left alone, followed later, resumed by the same
command (real single-host SLURM from tests/cluster/slurm.sh, no mocks)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from dpsuite.sweep import slurm
from tests.conftest import SMALL, run_subprocess
from tests.test_slurm import TIMEOUT_S, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

SWEEP = ["run", "-m", "mode=simulated", "workers=1,2", *SMALL, "train.max_steps=5"]


def dpsuite(*args: str) -> subprocess.CompletedProcess:
    return run_subprocess(*args, timeout=TIMEOUT_S)


def submit(out, *options: str) -> str:
    done = dpsuite("sbatch", "--submit", *options, *SWEEP, f"results_dir={out}")
    assert done.returncode == 0, done.stderr
    return re.search(r"submitted SLURM job (\d+)", done.stdout).group(1)


def ended(job_id: str) -> bool:
    return not slurm.states([job_id])[job_id].live


def status(out) -> str:
    done = dpsuite("sweep", "--status", str(out))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_detached_sweep_is_followed_then_resumed_by_the_same_command(tmp_path):
    out = tmp_path / "res"
    # Held, so that the submitting command has certainly returned before the job may start.
    job_id = submit(out, "--option=--hold")
    shown = status(out)
    assert f"SLURM job {job_id}: PENDING" in shown and "no sweep has started here yet" in shown
    again = dpsuite("sbatch", "--submit", *SWEEP, f"results_dir={out}")
    assert again.returncode == 2 and f"SLURM job {job_id} of {out} still runs" in again.stderr
    subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)
    wait_for(f"job {job_id} to end", lambda: ended(job_id), timeout=TIMEOUT_S)
    shown = status(out)
    assert f"SLURM job {job_id}: COMPLETED" in shown and "finished, 2 runs: 2 complete" in shown

    # One run lost (its directory removed): the same command runs it again, skips the other.
    lost = next(p for p in out.iterdir() if "-w2-" in p.name)
    shutil.rmtree(lost)
    job_id = submit(out)
    wait_for(f"job {job_id} to end", lambda: ended(job_id), timeout=TIMEOUT_S)
    shown = status(out)
    assert "finished, 2 runs: 1 complete, 1 skipped" in shown, shown
    assert f"{lost.name}: complete" in shown
    assert (lost / "run.json").is_file()


@pytest.mark.cluster  # the script submit writes is the one the first test submits
def test_the_written_script_submitted_by_hand_runs_the_sweep(tmp_path):
    out, script = tmp_path / "res", tmp_path / "sweep.sbatch"
    done = dpsuite("sbatch", "--out", str(script), *SWEEP, f"results_dir={out}")
    assert done.returncode == 0, done.stderr
    assert not out.exists() or not any(out.glob("*/run.json"))  # written, not run
    sbatch = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30
    )
    assert sbatch.returncode == 0, sbatch.stderr
    job_id = sbatch.stdout.strip()
    wait_for(f"job {job_id} to end", lambda: ended(job_id), timeout=TIMEOUT_S)
    assert "finished, 2 runs: 2 complete" in status(out)


@pytest.mark.cluster  # resuming itself is proven by the first test
def test_a_sweep_whose_job_was_cancelled_says_how_to_resume(tmp_path):
    out = tmp_path / "res"
    long_run = ["workers=1", "train.max_steps=100000", "train.epochs=10000"]
    done = dpsuite(
        "sbatch", "--submit", "run", "-m", "mode=simulated", *SMALL, *long_run, f"results_dir={out}"
    )
    assert done.returncode == 0, done.stderr
    job_id = re.search(r"submitted SLURM job (\d+)", done.stdout).group(1)
    wait_for("the run to start", lambda: any(out.glob("*/run.json")), timeout=TIMEOUT_S)
    subprocess.run(["scancel", job_id], check=True, timeout=30)  # as the time limit would
    wait_for(f"job {job_id} to end", lambda: ended(job_id), timeout=TIMEOUT_S)
    shown = status(out)
    assert f"SLURM job {job_id}: CANCELLED" in shown and ": interrupted, 1 runs" in shown, shown
    assert "its job ended before the sweep finished: submit the same command again" in shown
