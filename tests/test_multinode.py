"""One run across two SLURM nodes with a network of their own (tests/cluster/slurm2.sh).

Two slurmd, each in a network namespace with its own address and hostname (dn1 10.213.0.11,
dn2 10.213.0.12), joined through a bridge; each node's egress shaped with tbf to 1 Gbit/s. The
ranks of a run meet over that link; a node is killed in the middle of a sweep; the cluster is
torn down at the end and nothing of it may be left. `nox -s cluster` runs these (root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, only_run, read_params, read_run
from tests.test_cluster import RUN, max_diff
from tests.test_slurm import start, wait_for

pytestmark = pytest.mark.multinode

SCRIPT = REPO / "tests" / "cluster" / "slurm2.sh"
LINK_BYTES_PER_S = 1e9 / 8  # slurm2.sh's default link: tbf rate 1gbit
LAUNCHER = [
    "hydra/launcher=slurm",
    "hydra.launcher.nodes=2",
    "hydra.launcher.poll_s=1",
    "hydra.launcher.timeout_min=10",
]
TIMEOUT_S = 300


def cluster(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def two_nodes():
    """The two-node cluster, started here (root) and stopped by the last test of the module."""
    if os.geteuid() != 0:
        pytest.skip("the two-node test cluster needs root (namespaces, veths, daemons)")
    conf = cluster("env").stdout.strip().split("=", 1)[1]
    done = cluster("start", timeout=900)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"the two-node test cluster did not start: {lines[-1]}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    yield conf
    cluster("stop", timeout=300)  # a no-op when the last test stopped it
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """The reference: the same run with `workers=2` started on this host by dpsuite itself."""
    from dpsuite.cli.main import main

    out = tmp_path_factory.mktemp("local")
    assert main(["run", *RUN, "workers=2", f"results_dir={out}"]) == 0
    return only_run(out)


def bytes_sent(node: str) -> int:
    """Bytes that left ``node`` through its shaped link (its tbf qdisc's counter)."""
    out = subprocess.run(
        ["tc", "-n", f"dps-{node}", "-s", "-j", "qdisc", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(q["bytes"] for q in json.loads(out) if q["kind"] == "tbf")


def losses(run: Path) -> list[tuple[str, str]]:
    rows = [line.split(",") for line in (run / "epochs.csv").read_text().splitlines()]
    train, evaluation = rows[0].index("train_loss"), rows[0].index("eval_loss")
    return [(r[train], r[evaluation]) for r in rows[1:]]


def test_a_two_node_job_is_a_local_two_worker_run(dpsuite, tmp_path, two_nodes, local_run):
    """One rank on each node: the run a local workers=2 run is, its traffic over the link."""
    sent = {node: bytes_sent(node) for node in ("dn1", "dn2")}
    code = dpsuite("run", "-m", *LAUNCHER, *RUN, "workers=2", f"results_dir={tmp_path}")
    assert code == 0
    run = only_run(tmp_path)
    rec, local_rec = read_run(run), read_run(local_run)
    assert rec["status"] == "complete" and rec["run_id"] == local_rec["run_id"]
    assert rec["init_digest"] == local_rec["init_digest"]  # bitwise the same initial model
    assert losses(run) == losses(local_run)  # the same losses, to the last digit written
    assert max_diff(read_params(run), read_params(local_run)) <= 1e-10
    nodes = rec["hardware"]["nodes"]
    assert [(n["hostname"], n["ranks"], n["workers_per_host"]) for n in nodes] == [
        ("dn1", [0], 1),
        ("dn2", [1], 1),
    ]
    assert [(n["interface"], n["address"]) for n in nodes] == [
        ("eth0", "10.213.0.11"),
        ("eth0", "10.213.0.12"),
    ]
    assert nodes[0]["machine_id"] != nodes[1]["machine_id"]
    # 20 steps of fp64 gradients (~20k parameters) each way: well over a megabyte per node.
    for node, before in sent.items():
        assert bytes_sent(node) - before > 1_000_000, node


def test_a_rank_that_cannot_reach_the_master_says_so_in_one_line(tmp_path, two_nodes):
    """MASTER_ADDR on the nodes' network where no node answers (10.213.0.99)."""
    env = {**os.environ, "MASTER_ADDR": "10.213.0.99", "MASTER_PORT": "29400"}
    cmd = ["python", "-m", "dpsuite", "run", *RUN, "workers=2", f"results_dir={tmp_path}"]
    done = subprocess.run(
        ["srun", "-N2", "-n2", "--kill-on-bad-exit=1", "--chdir", str(REPO), *cmd],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("dpsuite: error:")]
    assert len(errors) == 1, done.stderr
    assert "rank 1 on dn2 cannot reach the master node 10.213.0.99 over eth0" in errors[0]


def test_comm_bench_across_the_nodes_measures_the_link(tmp_path, two_nodes):
    """all_reduce of 2 ranks on 2 nodes: busbw is the link's rate (within 20%, never above)."""
    cmd = ["python", "-m", "dpsuite", "comm-bench", "--sizes", "4M,16M", "-w", "1", "-n", "3"]
    done = subprocess.run(
        ["srun", "-N2", "-n2", "--kill-on-bad-exit=1", "--chdir", str(REPO), *cmd]
        + ["--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    (bench,) = tmp_path.glob("comm_bench/*/comm_bench.json")
    meta = json.loads(bench.read_text())
    assert meta["world_size"] == 2 and meta["errors_total"] == 0
    rows = (bench.parent / "comm_bench.csv").read_text().splitlines()
    header = rows[0].split(",")
    busbw = [float(r.split(",")[header.index("busbw_GBps")]) * 1e9 for r in rows[1:]]
    print(f"busbw {[f'{b / 1e6:.1f}' for b in busbw]} MB/s, link {LINK_BYTES_PER_S / 1e6:.0f}")
    assert all(0.8 * LINK_BYTES_PER_S <= b <= 1.05 * LINK_BYTES_PER_S for b in busbw), busbw


def records(out: Path) -> dict[int, dict]:
    """max_steps -> run.json, for the runs written so far."""
    found = {}
    for path in out.glob("*/run.json"):
        try:
            rec = json.loads(path.read_text())
        except ValueError:
            continue
        found[int(rec["config"]["train"]["max_steps"])] = rec
    return found


def test_a_node_that_dies_fails_its_run_and_the_sweep_goes_on(tmp_path, two_nodes):
    """Three 2-node runs one after the other; dn2 dies during the second (every process of it
    SIGKILLed). The second is marked failed naming dn2, the third cannot be scheduled (one
    line, not a hang), the first stays complete, and the command exits 1."""
    steps = "train.max_steps=20,1000000,30"
    proc = start(tmp_path, "hydra.launcher.nodes=2", "workers=2", steps, "train.epochs=100000")
    try:
        wait_for(
            "the long run to train",
            lambda: (
                (r := records(tmp_path).get(1000000))
                and r["status"] == "running"
                and (tmp_path / r["run_id"] / "epochs.csv").exists()  # training: evaluated once
            ),
            timeout=180,
        )
        assert cluster("kill-node", "dn2").returncode == 0
        killed = time.monotonic()
        failed = wait_for(
            "the run marked failed",
            lambda: (r := records(tmp_path)[1000000])["status"] == "failed" and r,
            timeout=120,
        )
        detected_s = time.monotonic() - killed
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"node death -> run marked failed: {detected_s:.1f} s")
    assert detected_s < 60  # the DDP timeout (ddp.timeout_s)
    assert proc.returncode == 1, out
    assert "on dn2 (10.213.0.12) stopped answering" in failed["error"]
    recs = records(tmp_path)
    assert recs[20]["status"] == "complete"
    assert recs[30]["status"] == "failed" and "unschedulable" in recs[30]["error"]
    assert sum("runs cannot be scheduled" in line for line in out.splitlines()) == 1, out
    assert "1 complete, 2 failed" in out
    assert cluster("revive-node", "dn2").returncode == 0


def test_stop_leaves_nothing_behind(two_nodes):
    """Namespaces, veths, bridge, slurmd, slurmctld, slurmdbd, mariadbd, munged: all gone."""
    assert cluster("stop", timeout=300).returncode == 0
    assert cluster("leftovers").stdout == ""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "dps-" not in namespaces
