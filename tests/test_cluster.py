"""Runs whose ranks are started by someone else: torchrun across "nodes", submitit, SLURM."""

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO, SMALL, max_diff, only_run, read_params, read_run

RUN = [
    *SMALL,
    "precision=fp64",
    "train.max_steps=20",
    "train.save_params=true",
    "threads_per_worker=1",
    "seed=2",
]


@pytest.fixture(scope="module")
def local_two_workers(tmp_path_factory):
    """The reference: `workers=2` started locally by dpsuite itself."""
    from dpsuite.cli.main import main

    out = tmp_path_factory.mktemp("local")
    assert main(["run", *RUN, "workers=2", f"results_dir={out}"]) == 0
    run = only_run(out)
    return read_run(run), read_params(run)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.multiproc
def test_two_torchrun_nodes_on_localhost_form_one_two_worker_run(tmp_path, local_two_workers):
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=dpsuite-test",
        "-m",
        "dpsuite",
        "run",
        *RUN,
        f"results_dir={tmp_path}",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    nodes = [
        subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0].decode() for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    rec = read_run(only_run(tmp_path))
    local_rec, local_params = local_two_workers
    assert rec["status"] == "complete" and rec["workers"] == 2 and rec["global_batch"] == 64
    assert rec["run_id"] == local_rec["run_id"]  # the same experiment, however it was started
    assert max_diff(read_params(only_run(tmp_path)), local_params) <= 1e-10


def pytorchjob_env(rank: int, port: int) -> dict[str, str]:
    """What a worker of a Kubeflow PyTorchJob of 2 pods x 1 process sees (the manifest of
    docs/slurm-and-multinode.md): the operator's PET_* variables, which torchrun reads as its
    options, and the variables torchrun's elastic agent then gives its worker."""
    return {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": "2",
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": "2",
        "ROLE_NAME": "default",
        "TORCHELASTIC_RUN_ID": "dpsuite-scaling",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        # The agent of node 0 hosts the rendezvous store; the workers are its clients.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.multiproc
def test_two_pytorchjob_pods_form_one_two_worker_run(tmp_path, local_two_workers):
    from datetime import timedelta

    from torch.distributed import TCPStore

    port = free_port()
    # This test plays node 0's elastic agent: it hosts the store the workers join.
    store = TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=300))
    cmd = [sys.executable, "-m", "dpsuite", "run", *RUN, f"results_dir={tmp_path}"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    pods = [
        subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**clean, **pytorchjob_env(rank, port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=300)[0].decode() for p in pods]
    finally:
        for p in pods:  # a hang fails the test and leaves nothing behind
            if p.poll() is None:
                p.kill()
                p.wait()
        del store
    assert [p.returncode for p in pods] == [0, 0], outputs
    rec = read_run(only_run(tmp_path))
    assert rec["status"] == "complete" and rec["workers"] == 2 and rec["global_batch"] == 64
    assert rec["run_id"] == local_two_workers[0]["run_id"]
    assert max_diff(read_params(only_run(tmp_path)), local_two_workers[1]) <= 1e-10


@pytest.mark.multiproc
def test_submitit_local_launcher_runs_a_two_task_job(tmp_path, local_two_workers):
    from dpsuite.cli.main import main

    code = main(
        [
            "run",
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.tasks_per_node=2",
            "hydra.launcher.timeout_min=5",
            *RUN,
            "workers=2",
            f"results_dir={tmp_path}",
        ]
    )
    assert code == 0
    run = only_run(tmp_path)
    rec = read_run(run)
    assert rec["status"] == "complete" and rec["workers"] == 2
    assert rec["run_id"] == local_two_workers[0]["run_id"]
    assert max_diff(read_params(run), local_two_workers[1]) <= 1e-10
    # Both tasks resolved the same Hydra directory (no per-rank or per-second directories).
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".dpsuite.lock", ".hydra", rec["run_id"], "sweep.json"]
    logs = list((tmp_path / ".hydra" / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2  # one log per task (rank)


def test_one_task_per_worker_is_checked_before_submitting(dpsuite, tmp_path, capsys):
    code = dpsuite(
        "run",
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.tasks_per_node=2",
        "workers=1,2",
        f"results_dir={tmp_path}",
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "workers=1 but the launcher starts 2 tasks per job" in err
    assert not list(tmp_path.rglob("run.json"))


def test_slurm_tasks_must_match_workers(dpsuite, tmp_path, capsys):
    code = dpsuite(
        "sweep",
        "scaling",
        "hydra/launcher=slurm",
        "hydra.launcher.nodes=2",
        "hydra.launcher.tasks_per_node=4",
        "hydra.launcher.gpus_per_node=4",
        f"results_dir={tmp_path}",
    )
    assert code == 2
    assert "workers=1 but the launcher starts 8 tasks per job" in capsys.readouterr().err


@pytest.mark.slurm
def test_a_two_task_slurm_job_is_a_local_two_worker_run(
    dpsuite, tmp_path, local_two_workers, slurm_cluster
):
    """One SLURM task per rank: the same run id and parameters as 2 workers started here."""
    code = dpsuite(
        "run",
        "-m",
        "hydra/launcher=slurm",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.poll_s=1",
        *RUN,
        "workers=2",
        f"results_dir={tmp_path}",
    )
    assert code == 0
    run = only_run(tmp_path)
    rec = read_run(run)
    assert rec["status"] == "complete" and rec["workers"] == 2
    assert rec["run_id"] == local_two_workers[0]["run_id"]
    assert max_diff(read_params(run), local_two_workers[1]) <= 1e-10
    hw, local_hw = rec["hardware"], local_two_workers[0]["hardware"]
    # Each task is bound to its share of the node, which is still the machine the local run saw.
    assert hw["workers_per_host"] == 2 and hw["cpus_usable"] < os.cpu_count()
    assert not hw["oversubscribed"] and hw["machine_id"] == local_hw["machine_id"]
