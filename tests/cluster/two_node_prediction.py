"""Predicted vs measured 2-node step time on two test nodes pinned to cores of their own (root):

    python -m tests.cluster.two_node_prediction [OUT] [--repeats 3]

Two network namespaces joined by a 1 Gbit/s veth link (``pinned_nodes``), node 1 on CPU 0, node
2 on CPU 1. For each workload (tiny_gpt, mnist1d_mlp; one worker thread each) it runs, in turn,
1 node x 1 worker (on node 1) and 2 nodes x 1 worker, ``--repeats`` times, then `dpsuite
predict` fed by the 1-node runs and by comm-bench over the veth link (and on one node, for the
link inside one, which a node of one rank never uses) predicts the 2-node step: the 2-node runs
are kept out of what predict reads. Prints predict's own output (its caveats among it), then
the predicted vs measured medians, the error, where the difference lies (the exposed
communication the runs measured vs the model's) and the host's load average at each start.
Stops exactly what it started: its processes, the namespaces and their link.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from tests.cluster.pinned_nodes import PinnedNodes

TAG = "pinned-two-node"
WORKLOADS = {"tiny_gpt": 40, "mnist1d_mlp": 300}  # max_steps: 10+ s of steps each
TIMEOUT_S = 600
BENCH = ["--sizes", "4K:32M", "-f", "2", "-w", "2", "-n", "10", "--tag", TAG]
BENCH_REPEATS = 3  # comm-bench across the nodes, on a host whose load drifts


def dpsuite(*args: str) -> list[str]:
    return [sys.executable, "-m", "dpsuite", *args]


def run_args(workload: str, workers: int, repeat: int, results_dir: Path) -> list[str]:
    """A run of ``workload``; ``repeat`` makes each repeat a run of its own (its own run id)."""
    steps = WORKLOADS[workload]
    return dpsuite(
        "run", f"workload={workload}", f"workers={workers}", "threads_per_worker=1",
        f"train.max_steps={steps}", f"repeat={repeat}", f"hardware.tag={TAG}",
        f"results_dir={results_dir}",
    )  # fmt: skip


def measure(out: Path, repeats: int) -> list[float]:
    """The comm-benches, then each workload's 1-node and 2-node runs in turn; the host's load
    average at the start of each."""
    loads = []
    fit_dir, measured_dir, logs = out / "fit", out / "measured", out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with PinnedNodes() as nodes:
        for bench in range(BENCH_REPEATS):  # the model reads the median at each size
            loads.append(os.getloadavg()[0])
            nodes.run_on_both(dpsuite("comm-bench", *BENCH, "--results-dir", str(fit_dir)),
                              TIMEOUT_S, logs / f"comm-bench-across-{bench}")  # fmt: skip
        # the link inside one node: two ranks on the host's two cores (a node of one rank
        # never uses it, but the fit asks for it)
        with open(logs / "comm-bench-one-node.log", "w") as log:
            subprocess.run(
                dpsuite("comm-bench", "--workers", "2", *BENCH, "--results-dir", str(fit_dir)),
                check=True, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT_S,
            )  # fmt: skip
        for repeat in range(repeats):
            for workload in WORKLOADS:
                loads.append(os.getloadavg()[0])
                with open(logs / f"{workload}-1node-{repeat}.log", "w") as log:
                    one = nodes.popen(0, run_args(workload, 1, repeat, fit_dir), stdout=log,
                                      stderr=subprocess.STDOUT)  # fmt: skip
                    if one.wait(timeout=TIMEOUT_S) != 0:
                        raise RuntimeError(f"{workload} on one node failed (log: {log.name})")
                loads.append(os.getloadavg()[0])
                nodes.run_on_both(run_args(workload, 2, repeat, measured_dir), TIMEOUT_S,
                                  logs / f"{workload}-2nodes-{repeat}")  # fmt: skip
    assert not nodes.leftovers(), nodes.leftovers()
    return loads


def predicted(fit_dir: Path, out: Path, show: bool = True) -> pd.DataFrame:
    """`dpsuite predict` on ``fit_dir``'s 1-node runs and comm-benches (its output printed
    where ``show``), its predictions."""
    from dpsuite import results

    batch = int(results.load(fit_dir)["per_worker_batch"].iloc[0])
    done = subprocess.run(
        dpsuite("predict", str(fit_dir), "--workers", "1,2", "--batch", str(batch),
                "--out", str(out)),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    if show:
        print(done.stdout)
    return pd.read_csv(out / "predictions.csv")


def paired_errors(out: Path, one: pd.DataFrame, two: pd.DataFrame) -> dict[str, list[float]]:
    """Each 2-node run against predict fed by the 1-node run just before it (same repeat) and
    the comm-benches: the host's load drifts over minutes, and a pair is minutes apart at most.
    Error in % per repeat, per workload."""
    errors: dict[str, list[float]] = {w: [] for w in WORKLOADS}
    for repeat in sorted(two["repeat"].unique()):
        alone = out / "paired" / f"r{repeat}"
        shutil.copytree(out / "fit" / "comm_bench", alone / "comm_bench", dirs_exist_ok=True)
        for run in one[one["repeat"] == repeat]["run_dir"]:
            shutil.copytree(run, alone / Path(run).name, dirs_exist_ok=True)
        pred = predicted(alone, alone / "prediction", show=False)
        for workload in WORKLOADS:
            p = pred[(pred["workload"] == workload) & (pred["workers"] == 2)]["step_time_s"]
            m = two[(two["workload"] == workload) & (two["repeat"] == repeat)]["step_time_s"]
            if len(p) and len(m):
                errors[workload].append(100 * (p.iloc[0] - m.iloc[0]) / m.iloc[0])
    return errors


def rank_parts(run_dirs: pd.Series) -> tuple[float, float]:
    """Medians over the runs' steps (ms): the slower rank's compute, and the wait of a rank for
    its peer (steps_by_rank.csv)."""
    compute, wait = [], []
    for run_dir in run_dirs:
        steps = pd.read_csv(Path(run_dir) / "steps_by_rank.csv")
        compute.extend(steps.groupby("step")["compute_s"].max() * 1e3)
        wait.extend(steps.groupby("step")["peer_wait_s"].max() * 1e3)
    return statistics.median(compute), statistics.median(wait)


def _median_ms(values: pd.Series) -> float:
    values = values.dropna()
    return statistics.median(values * 1e3) if len(values) else float("nan")


def report(out: Path, loads: list[float]) -> None:
    """Predicted vs measured 2-node step per workload, and where they part: the compute a
    2-node rank measured (vs one node's, and the model's compute and wait) and the exposed
    communication (measured vs the model's)."""
    from dpsuite import results

    pred = predicted(out / "fit", out / "prediction")
    one, two = results.load(out / "fit"), results.load(out / "measured")
    paired = paired_errors(out, one, two)
    print("2 nodes x 1 worker, medians over the repeats (ms):")
    for workload in WORKLOADS:
        p = pred[(pred["workload"] == workload) & (pred["workers"] == 2)].iloc[0]
        runs, single = two[two["workload"] == workload], one[one["workload"] == workload]
        steps = sorted(runs["step_time_s"] * 1e3)
        measured = statistics.median(steps)
        error = 100 * (p.step_time_s * 1e3 - measured) / measured
        each = ", ".join(f"{s:.1f}" for s in steps)
        print(
            f"  {workload}: predicted {p.step_time_s * 1e3:.2f}, measured {measured:.2f} "
            f"({each}), error {error:+.1f} %; 1 node measured "
            f"{_median_ms(single['step_time_s']):.2f} ({len(single)} runs)"
        )
        compute, peer_wait = rank_parts(runs["run_dir"])
        print(
            f"    compute: predicted {p.compute_s * 1e3:.2f} + wait for the slower rank "
            f"{p.straggler_wait_s * 1e3:.2f}; measured on 2 nodes: the slower rank's compute "
            f"{compute:.2f}, the other's wait for it {peer_wait:.2f}"
        )
        print(
            f"    exposed communication: predicted {p.exposed_comm_s * 1e3:.2f} (all-reduce "
            f"{p.comm_s * 1e3:.2f}), measured {_median_ms(runs['exposed_comm_s']):.2f}"
        )
        pairs = paired[workload]
        print(
            f"    paired (each 2-node run vs predict fed by its repeat's 1-node run): error "
            f"median {statistics.median(pairs):+.1f} % ({', '.join(f'{e:+.0f}' for e in pairs)})"
        )
    print(
        f"load average (1 min) at each start: median {statistics.median(loads):.2f}, "
        f"min {min(loads):.2f}, max {max(loads):.2f} on {os.cpu_count()} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="results here (default: a temporary directory)")
    parser.add_argument("--repeats", type=int, default=3)
    a = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("two_node_prediction: needs root (network namespaces)")
    out = Path(a.out or tempfile.mkdtemp(prefix="dpsuite-pinned-"))
    loads = measure(out, a.repeats)
    report(out, loads)
    print(f"results: {out}")


if __name__ == "__main__":
    main()
