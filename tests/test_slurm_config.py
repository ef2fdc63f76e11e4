"""The SLURM launcher's configuration and the SLURM facts dpsuite reads, without a cluster:
the batch script it would submit, resource defaults, one-line refusals, environment parsing."""

from __future__ import annotations

import pytest
from submitit.slurm.slurm import SlurmExecutor

from dpsuite.conf.compose import plan
from dpsuite.measure import fingerprint
from dpsuite.runtime.ranks import ranks_from_env, slurm_tasks_on_node
from dpsuite.sweep import slurm, slurm_launcher


def script(monkeypatch, *overrides: str) -> str:
    """The sbatch script of a sweep's job array, as the launcher would submit it."""
    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # "srun exists"
    p = plan(["hydra/launcher=slurm", *overrides], multirun=True)
    assert p.launcher.slurm
    return slurm_launcher.batch_script(p.launcher.params, p.specs)


def test_defaults_fit_a_cpu_cluster_and_keep_timings_alone(monkeypatch, tmp_path):
    text = script(monkeypatch, "workers=1,2,4", f"results_dir={tmp_path}")
    for line in (
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",  # jobs never share a node: timings are the run's own
        "#SBATCH --array=0-2%3",
        "#SBATCH --time=60",
        "#SBATCH --job-name=dpsuite",
    ):
        assert line in text, text
    assert "gpus" not in text and "gres" not in text  # a CPU cluster refuses a GPU request
    assert "--cpus-per-task" not in text  # exclusive: the task has the whole node
    assert "--kill-on-bad-exit=1" in text  # a dead rank ends its job at once
    assert str(tmp_path / ".hydra" / ".submitit") in text and "${" not in text


def test_without_exclusive_a_task_gets_cores_for_its_workers_and_threads(monkeypatch, tmp_path):
    common = ["hydra.launcher.exclusive=false", f"results_dir={tmp_path}"]
    text = script(monkeypatch, "workers=1,4", "threads_per_worker=2", *common)
    assert "#SBATCH --cpus-per-task=8" in text and "--exclusive" not in text
    text = script(monkeypatch, "workers=1,3", *common)  # threads unset: one per worker
    assert "#SBATCH --cpus-per-task=3" in text
    text = script(monkeypatch, "workers=2", "hydra.launcher.tasks_per_node=2", *common)
    assert "#SBATCH --cpus-per-task=1" in text  # one rank per task
    text = script(monkeypatch, "workers=2", "hydra.launcher.nodes=2", *common)
    assert "#SBATCH --cpus-per-task=1" in text  # one rank per task, one task per node


def test_a_job_waiting_for_down_nodes_is_told_from_one_waiting_for_cores():
    down = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority"
    assert slurm.JobState("PENDING", down).waits_for_down_nodes
    assert slurm.JobState("PENDING", "ReqNodeNotAvail, UnavailableNodes:dn2").waits_for_down_nodes
    assert not slurm.JobState("PENDING", "Resources").waits_for_down_nodes
    assert not slurm.JobState("RUNNING", down).waits_for_down_nodes


def test_gpu_example_renders_one_task_per_gpu(monkeypatch, tmp_path):
    text = script(
        monkeypatch,
        "hydra.launcher.partition=gpu",
        "hydra.launcher.nodes=2",
        "hydra.launcher.tasks_per_node=4",
        "hydra.launcher.gpus_per_node=4",
        "hydra.launcher.timeout_min=30",
        "workers=8",
        "batch.per_worker=32,128",
        "device=cuda",  # checked on the nodes, not on this (login) machine
        f"results_dir={tmp_path}",
    )
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=30",
        "#SBATCH --array=0-1%2",
    ):
        assert line in text, text


def test_gpus_per_node_null_is_the_default_not_a_crash(tmp_path):
    p = plan(
        ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=null", f"results_dir={tmp_path}"],
        multirun=True,
    )
    assert p.launcher.tasks == 1 and p.launcher.params["gpus_per_node"] is None


def test_launcher_mistakes_are_one_line_before_any_work(dpsuite, tmp_path, capsys):
    for args, message in (
        (["hydra/launcher=slurm"], "hydra/launcher submits the runs of a sweep: add -m"),
        (["hydra/launcher=submitit_local"], "hydra/launcher submits the runs of a sweep: add -m"),
        (["-m", "hydra/launcher=slurm", "hydra.launcher.nodes=0"], "nodes must be an integer"),
        (["-m", "hydra/launcher=slurm", "hydra.launcher.tasks_per_node=two"], "tasks_per_node"),
    ):
        assert dpsuite("run", *args, f"results_dir={tmp_path}") == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dpsuite: error: ") and message in err[0], err
    assert not list(tmp_path.rglob("run.json"))


def test_no_slurm_here_is_one_line(dpsuite, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no squeue
    assert dpsuite("run", "-m", "hydra/launcher=slurm", f"results_dir={tmp_path}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "dpsuite: error: hydra/launcher=slurm needs SLURM's sbatch, srun, squeue, scancel on "
        "this machine (a login node of the cluster); not found on PATH: sbatch, srun, squeue, "
        "scancel"
    ]


def test_sacct_array_ranges_and_error_lines_are_read():
    assert slurm.expand_job_id("12_[0-2,5]") == ["12_0", "12_1", "12_2", "12_5"]
    assert slurm.expand_job_id("12_[1-3%2]") == ["12_1", "12_2", "12_3"]
    assert slurm.expand_job_id("12_4") == ["12_4"]
    assert slurm.array_ids(["12_0", "13", "12_1"]) == ["12", "13"]
    stderr = "sbatch: error: Batch job submission failed: Invalid account\n"
    assert slurm.error_line(stderr) == "Batch job submission failed: Invalid account"
    assert slurm.error_line("sbatch: unrecognized option '--x'\nTry sbatch --help\n") == (
        "unrecognized option '--x'"
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}, 1),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "1"}, 2),
        ({"SLURM_TASKS_PER_NODE": "4"}, 4),
        ({"SLURM_NTASKS_PER_NODE": "8"}, 8),
        ({}, 1),
    ],
)
def test_tasks_on_this_node_from_slurm_variables(env, expected):
    assert slurm_tasks_on_node(env) == expected


SRUN_N2 = {  # what `srun -n2` sets for the second task (no SLURM_NTASKS_PER_NODE)
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_CPUS_ON_NODE": "2",
}


def test_srun_ranks_know_how_many_share_their_node(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in SRUN_N2.items():
        monkeypatch.setenv(key, value)
    ranks = ranks_from_env()
    assert ranks is not None and (ranks.rank, ranks.world_size) == (1, 2)
    assert ranks.local_rank == 1 and ranks.local_world_size == 2


def test_oversubscription_is_judged_per_task_and_per_node(monkeypatch):
    for key, value in SRUN_N2.items():
        monkeypatch.setenv(key, value)
    # Two ranks, each its own task bound to one core of a 2-core allocation: not crowded.
    assert not fingerprint.oversubscribed(2, 1, cores=1, allocated=2)
    assert fingerprint.oversubscribed(2, 2, cores=1, allocated=2)  # 2 threads on 1 core
    for key in SRUN_N2:
        monkeypatch.delenv(key)
    # Spawned workers share their process's cores.
    assert not fingerprint.oversubscribed(2, 1, cores=2, allocated=None)
    assert fingerprint.oversubscribed(2, 1, cores=1, allocated=None)
    assert fingerprint.oversubscribed(4, 1, cores=2, allocated=2)


# `squeue --noheader --array --states=PENDING --sort=-p,i --format=%i|%P|%Q` as SLURM prints
# it: every pending job of every user, highest priority first; array elements one per line.
PENDING_QUEUE = """\
7|gpu|4294901757
12_3|debug|4294901755
12_4|debug|4294901755
9|debug,long|4294901750
12_5|debug|4294901749
"""


def test_queue_places_of_pending_jobs_are_read_from_squeue():
    places = slurm.parse_queue(PENDING_QUEUE, {"12_4", "12_5", "9"})
    assert places["12_4"] == slurm.QueuePlace(position=2, pending=4, partition="debug")
    assert places["12_5"] == slurm.QueuePlace(position=4, pending=4, partition="debug")
    assert places["9"] == slurm.QueuePlace(position=1, pending=1, partition="long")
    assert "7" not in places  # someone else's job: counted, never reported


def test_the_pending_note_says_why_and_where_the_jobs_wait():
    states = {
        "12_3": slurm.JobState("RUNNING", "None", "node1"),
        "12_4": slurm.JobState("PENDING", "Resources"),
        "12_5": slurm.JobState("PENDING", "Priority"),
        "12_6": slurm.JobState("PENDING", "Priority"),
    }
    places = slurm.parse_queue(PENDING_QUEUE, set(states))
    assert slurm.pending_note(states, places) == (
        "3 of 4 unfinished SLURM jobs pending (2 Priority, 1 Resources); the first in the "
        "queue is 2 of 4 in debug"
    )
    assert slurm.pending_note({"12_3": states["12_3"]}, {}) is None
