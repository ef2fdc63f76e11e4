"""A results tree of N runs for the readers (report, compare, export), and their wall times.

    python tests/bench/readers_tree.py [--runs 10000] [--templates results/reference]
        [--keep DIR | --reuse DIR] [--commands report compare parquet]

The runs are copies of real run directories (those below ``--templates``, written by real
``dpsuite run`` sweeps on two CPU machines): each copy is given a repeat index of its own in its
config and record, hence its own run id (the config's hash, as a run computes it), and its
throughput metrics are scaled by a few percent, so that every run passes the results gate like
the original. epochs.csv and steps.csv are copied as they are. The tree holds one folder per
template machine (``--keep`` a folder to keep it), so that ``compare`` has two sides.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MACHINES = ("xeon-2core-cpu", "epyc-2core-cpu")  # CPU trees of the reference results
PER_FOLDER = 500  # runs per sweep folder, as a few large sweeps would leave them
FIRST_REPEAT = 1000  # above any repeat index of the templates, so no copy meets its original
SCALED_METRICS = ("samples_per_s", "samples_per_s_per_worker")


def templates(root: Path, machine: str) -> list[Path]:
    """The complete runs below ``root/machine`` (one run.json each), sorted."""
    found = []
    for record in sorted((root / machine).rglob("run.json")):
        if json.loads(record.read_text())["status"] == "complete":
            found.append(record.parent)
    return found


def varied(record: dict[str, Any], repeat: int, rng: random.Random) -> dict[str, Any]:
    """The record of a copy: its own repeat index and run id, throughput within +-5 %."""
    from dpsuite import results

    record = json.loads(json.dumps(record))  # a deep copy
    record["repeat"] = record["config"]["repeat"] = repeat
    identity = results.run_identity(record["config"], record["workers"], record["global_batch"])
    record["run_id"] = results.make_run_id(record, identity)
    factor = 1.0 + rng.uniform(-0.05, 0.05)
    metrics = record.get("metrics") or {}
    for name in SCALED_METRICS:
        if isinstance(metrics.get(name), (int, float)):
            metrics[name] *= factor
    if isinstance(metrics.get("step_time_s"), (int, float)):
        metrics["step_time_s"] /= factor
    return record


def write_tree(root: Path, runs: int, template_root: Path = REPO / "results/reference") -> int:
    """``runs`` valid runs below ``root``, split evenly over the template machines."""
    rng = random.Random(0)
    written = 0
    for m, machine in enumerate(MACHINES):
        sources = templates(template_root, machine)
        share = runs // len(MACHINES) + (1 if m < runs % len(MACHINES) else 0)
        for i in range(share):
            source = sources[i % len(sources)]
            record = varied(json.loads((source / "run.json").read_text()), FIRST_REPEAT + i, rng)
            run_dir = root / machine / f"sweep{i // PER_FOLDER:03d}" / record["run_id"]
            run_dir.mkdir(parents=True)
            (run_dir / "run.json").write_text(json.dumps(record, indent=2))
            for name in ("epochs.csv", "steps.csv"):
                if (source / name).exists():
                    shutil.copyfile(source / name, run_dir / name)
            written += 1
    return written


def command_lines(tree: Path, scratch: Path) -> dict[str, list[str]]:
    """The three readers' command lines over ``tree``."""
    dpsuite = [sys.executable, "-m", "dpsuite"]
    sides = [str(tree / machine) for machine in MACHINES]
    return {
        "report": [*dpsuite, "report", str(tree), "--out", str(scratch / "report")],
        "compare": [*dpsuite, "compare", *sides, "--out", str(scratch / "compare")],
        "parquet": [*dpsuite, "export", "parquet", str(tree)],
    }


def timed(command: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one command, which must succeed (its output
    is not shown). On a shared machine the CPU time is the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--templates", type=Path, default=REPO / "results/reference")
    p.add_argument("--keep", type=Path, help="write the tree here and keep it")
    p.add_argument("--reuse", type=Path, help="time the commands on this tree (written before)")
    p.add_argument("--commands", nargs="*", default=["report", "compare", "parquet"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpsuite-readers-") as scratch:
        if args.reuse:
            tree, n = args.reuse, sum(1 for _ in args.reuse.rglob("run.json"))
        else:
            tree = args.keep or Path(scratch) / "results"
            started = time.perf_counter()
            n = write_tree(tree, args.runs, args.templates)
            print(f"tree: {n} runs in {tree} ({time.perf_counter() - started:.1f} s to write)")
        lines = command_lines(tree, Path(scratch))
        for name in args.commands:
            wall, cpu = timed(lines[name])
            print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU over {n} runs", flush=True)


if __name__ == "__main__":
    main()
