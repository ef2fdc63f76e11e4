"""Sweeps on a real single-host SLURM (sbatch, srun, squeue, sacct, scancel; no mocks).

The cluster is started by the ``slurm_cluster`` fixture (tests/cluster/slurm.sh). Each test
keeps its runs tiny; a job's process start (interpreter, torch, Hydra) is most of its time.
On the test node (exclusive jobs by default) the jobs of a sweep run one after the other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpsuite.sweep import slurm
from tests.conftest import REPO, SMALL

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

LAUNCHER = ["hydra/launcher=slurm", "hydra.launcher.poll_s=1", "hydra.launcher.timeout_min=10"]
TINY = [*SMALL, "train.max_steps=20"]
LONG = "100000"  # max_steps of a run that is killed or cancelled long before it ends
# max_steps only caps a run: without more epochs than the default, a LONG run ends after its
# default epochs (a few seconds), possibly before the test has seen it train.
MANY_EPOCHS = "train.epochs=10000"
TIMEOUT_S = 240  # no command here may take longer: a hang fails the test instead


def sweep_args(out: Path, *extra: str) -> list[str]:
    return ["run", "-m", *LAUNCHER, *SMALL, *extra, f"results_dir={out}"]


def start(out: Path, *extra: str) -> subprocess.Popen:
    """`dpsuite run -m ...` in its own process group, as a terminal would start it."""
    return subprocess.Popen(
        [sys.executable, "-m", "dpsuite", *sweep_args(out, *extra)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )


def wait_for(what: str, predicate, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def records(out: Path) -> dict[str, dict]:
    """run_id -> run.json, for every run directory written so far."""
    found = {}
    for path in out.glob("*/run.json"):
        try:
            found[path.parent.name] = json.loads(path.read_text())
        except ValueError:  # never torn (atomic writes), but be safe against a partial copy
            continue
    return found


def running_run(out: Path, max_steps: str) -> dict | None:
    """The run.json of the run with this max_steps once its job has started training it."""
    for rec in records(out).values():
        if rec["status"] == "running" and str(rec["config"]["train"]["max_steps"]) == max_steps:
            return rec
    return None


def manifest(out: Path) -> dict:
    return json.loads((out / "sweep.json").read_text())


def live_jobs(out: Path) -> list[str]:
    ids = [j["job_id"] for j in manifest(out)["jobs"].values()]
    return sorted(j for j, s in slurm.states(ids).items() if s.live)


# Two runs long enough (seconds, not the default epochs' 500 steps that end before the
# interrupt lands) to be interrupted while the first trains and the second is pending.
INTERRUPTED = ["train.max_steps=4000", "train.epochs=200", "seed=0,1"]


def interrupt_when_running(out: Path, sig: int) -> str:
    """Start the two-run sweep, send ``sig`` to its process group once a job trains; its output."""
    proc = start(out, *INTERRUPTED)
    try:
        wait_for("a job to run", lambda: running_run(out, "4000"))
        os.killpg(proc.pid, sig)
        return proc.communicate(timeout=TIMEOUT_S)[0]
    finally:
        proc.kill()


def assert_rerun_resumes(out: Path) -> None:
    """The sweep run again completes with every run once, each complete."""
    done = rerun(out)
    assert done.returncode == 0, done.stdout + done.stderr
    recs = records(out)
    assert len(recs) == 2 and {r["status"] for r in recs.values()} == {"complete"}
    assert manifest(out)["state"] == "finished"


def rerun(out: Path) -> subprocess.CompletedProcess:
    """The same two-run sweep again, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "dpsuite", *sweep_args(out, *INTERRUPTED)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_cpu_sweep_with_the_launcher_defaults_completes_and_shows_its_jobs(
    dpsuite, tmp_path, capsys
):
    local = tmp_path / "local"
    assert dpsuite("run", *TINY, f"results_dir={local}") == 0
    out = tmp_path / "slurm"
    assert dpsuite(*sweep_args(out, "train.max_steps=20", "workers=1,2")) == 0
    printed = capsys.readouterr().out
    m = manifest(out)
    assert m["state"] == "finished" and m["counts"] == {"complete": 2}
    assert set(m["jobs"]) == set(m["run_ids"])
    for run_id, job in m["jobs"].items():
        assert Path(job["log_out"]).is_file() and Path(job["log_err"]).is_file()
        # Progress as the run.json files changed: submitted (job, log), running, finished.
        assert f"{run_id}: job {job['job_id']}, log {job['log_out']}" in printed
        assert f"{run_id}: running on " in printed
        assert f"{run_id}: complete" in printed and f"(job {job['job_id']})" in printed
    assert "sweep multirun finished: 2 runs: 2 complete" in printed
    # The fingerprint is the node's, whatever the job's binding: one machine for all runs.
    local_hw = next(iter(records(local).values()))["hardware"]
    for rec in records(out).values():
        hw = rec["hardware"]
        assert rec["status"] == "complete"
        assert hw["machine_id"] == local_hw["machine_id"] and hw["cpu_count"] == os.cpu_count()
        # Exclusive by default: the job has the whole node, and its workers share it.
        assert hw["cpus_allocated"] == hw["cpus_usable"] == os.cpu_count()
        assert hw["workers_per_host"] == rec["workers"] and not hw["oversubscribed"]
        assert rec["threads_per_worker"] == max(1, os.cpu_count() // rec["workers"])


def test_a_killed_job_costs_exactly_its_run_and_cancelled_jobs_end_theirs(tmp_path):
    """SIGKILL of one job's training process, scancel of a running and of a pending job: those
    runs fail with the reason, the last one completes, the command ends with the summary."""
    out = tmp_path / "res"
    proc = start(out, MANY_EPOCHS, f"train.max_steps={LONG},{LONG}1,{LONG}2,20")
    try:
        killed = wait_for("the first run to train", lambda: running_run(out, LONG))
        os.kill(killed["pid"], signal.SIGKILL)
        t_kill = time.monotonic()
        failed = wait_for(
            "the killed run to be marked failed",
            lambda: records(out)[killed["run_id"]]["status"] == "failed",
            timeout=60,  # the goal: a dead job's run is marked failed within a minute
        )
        detection_s = time.monotonic() - t_kill
        cancelled = wait_for("the second run to train", lambda: running_run(out, f"{LONG}1"))
        jobs = manifest(out)["jobs"]
        [pending] = [j["job_id"] for j in jobs.values() if j["job_id"].endswith("_2")]
        assert slurm.states([pending])[pending].state == "PENDING"  # the node is busy
        subprocess.run(["scancel", jobs[cancelled["run_id"]]["job_id"], pending], check=True)
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert failed and proc.returncode == 1, output
    assert "sweep multirun finished: 4 runs: 1 complete, 3 failed" in output
    recs = records(out)
    by_steps = {str(r["config"]["train"]["max_steps"]): r for r in recs.values()}
    assert by_steps["20"]["status"] == "complete"
    killed_rec = recs[killed["run_id"]]
    assert killed_rec["status"] == "failed"
    assert killed_rec["error"].startswith(f"SLURM job {jobs[killed['run_id']]['job_id']} ended")
    assert "Killed" in killed_rec["error"] and "log " in killed_rec["error"]
    assert recs[cancelled["run_id"]]["status"] == "failed"  # the run saw SIGTERM and said so
    assert recs[cancelled["run_id"]]["error"] == "interrupted"
    never = by_steps[f"{LONG}2"]
    assert never["status"] == "failed" and "before the run started" in never["error"]
    assert not live_jobs(out)
    print(f"job killed -> run marked failed: {detection_s:.1f} s (poll 1 s)")


def test_a_request_slurm_can_never_run_is_one_error_line(dpsuite, tmp_path, capsys):
    # Refused by `sbatch --test-only` before anything starts: more tasks than the node has CPUs.
    tasks = os.cpu_count() + 1
    code = dpsuite(
        *sweep_args(tmp_path / "a", f"hydra.launcher.tasks_per_node={tasks}", f"workers={tasks}")
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("dpsuite: error: SLURM refuses the sweep's jobs: ")
    assert "Requested node configuration is not available" in err[0]
    assert not (tmp_path / "a").exists() or not list((tmp_path / "a").glob("*/run.json"))
    # Accepted, then pending forever: a time limit beyond the partition's (tests/cluster/).
    t0 = time.monotonic()
    code = dpsuite(*sweep_args(tmp_path / "b", *TINY[1:], "hydra.launcher.partition=short"))
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("dpsuite: error: SLURM can never start job ")
    assert "(PartitionConfig" in err[0] and time.monotonic() - t0 < 60
    assert not live_jobs(tmp_path / "b")  # cancelled, not left pending


@pytest.mark.cluster  # Ctrl-C itself is proven locally (tests/test_faults.py)
def test_ctrl_c_cancels_the_jobs_and_a_rerun_resumes_without_duplicates(tmp_path):
    out = tmp_path / "res"
    output = interrupt_when_running(out, signal.SIGINT)
    # Ctrl-C: the running and the pending job are cancelled and gone before the command returns.
    assert "cancelling 2 SLURM jobs" in output and "dpsuite: interrupted" in output, output
    assert manifest(out)["state"] == "interrupted" and len(manifest(out)["jobs"]) == 2
    assert not live_jobs(out)
    assert "running" not in {r["status"] for r in records(out).values()}
    assert_rerun_resumes(out)  # every run once, each complete


@pytest.mark.cluster
def test_a_rerun_while_a_killed_commands_jobs_live_is_refused_then_resumes(tmp_path):
    out = tmp_path / "res"
    # SIGKILL: nothing cancels the jobs, so a rerun while they live is refused in one line.
    interrupt_when_running(out, signal.SIGKILL)
    assert live_jobs(out)
    refused = rerun(out)
    err = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(err) == 1, refused.stderr
    assert "SLURM jobs of an earlier sweep" in err[0] and "scancel" in err[0]
    wait_for("the orphaned jobs to end", lambda: not live_jobs(out), timeout=TIMEOUT_S)
    assert_rerun_resumes(out)  # every run once, each complete (by the orphans or again now)


@pytest.mark.cluster
def test_srun_tasks_record_their_workers_per_host(tmp_path):
    """`srun -n2 dpsuite run ...`: the two tasks are the two ranks of one run on this node."""
    done = subprocess.run(
        ["srun", "-n2", sys.executable, "-m", "dpsuite", "run", *TINY, f"results_dir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [rec] = records(tmp_path).values()
    assert rec["status"] == "complete" and rec["workers"] == 2
    hw = rec["hardware"]
    assert hw["workers_per_host"] == 2 and hw["cpu_count"] == os.cpu_count()
    assert not hw["oversubscribed"]  # each task has its own core


def test_sacct_reads_the_final_state_of_a_finished_job(tmp_path):
    """Accounting answers for jobs the controller has forgotten (after MinJobAge)."""
    done = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--output={tmp_path}/out", "--wrap=true"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    job_id = done.stdout.strip().split(";")[0]
    assert slurm._sacct([job_id])[job_id].state == "COMPLETED"
