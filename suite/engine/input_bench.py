"""`dpsuite input-bench`: samples/s of a workload's training input pipeline alone.

The pipeline is the engine's own (``train.build_source``, ``batch_sources``): for Datasets a
DataLoader per rank over its DistributedSampler share, with the run's ``data.loader_*``
settings, each batch moved to the device; for in-memory tensors the index batches and the
gather of their samples (what a step takes from memory). No model runs.

Each point is a rank count and a ``data.loader_workers`` value. Its ranks are processes started
the way a DDP run starts them (``distributed.spawn_local`` with ``ddp.start_method``; one rank
runs in this process, as a one-worker run does), all reading their shares at once, so that
they contend for the host's cores and disk as in training. Each rank takes a first batch (the
loader workers start: ``first_batch_s``), ``warmup`` more, then times ``batches`` batches; the
slowest rank's time gives the point's rates.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from dpsuite.conf import compose
from dpsuite.conf.run_spec import RunSpec
from dpsuite.engine import data_memo
from dpsuite.engine.batch_sources import BatchSource, DataProblem, TensorBatches
from dpsuite.engine.launch import scratch_dir, worker_imports
from dpsuite.engine.train import build_source
from dpsuite.engine.workload_calls import WorkloadError
from dpsuite.errors import UserError
from dpsuite.measure.fingerprint import fingerprint
from dpsuite.optim.precision import Precision
from dpsuite.results import lock as results_lock
from dpsuite.results import now_iso, write_input_bench
from dpsuite.results.store import new_result_dir
from dpsuite.runtime import distributed
from dpsuite.runtime.host import check_writable, usable_cores, wait_for_device
from dpsuite.runtime.ranks import Ranks
from dpsuite.workloads.base import Datasets

AXES = ("ranks", "data.loader_workers")
IN_MEMORY = "in memory"
RANK_PROCESSES = (
    "each point's ranks are processes started as a DDP run starts them, all reading their "
    "DistributedSampler share at once"
)
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class InputBenchSpec:
    """A validated input-bench invocation: one resolved run config per point."""

    points: tuple[RunSpec, ...]
    overrides: tuple[str, ...]
    batches: int
    warmup: int
    tag: str | None

    @property
    def results_dir(self) -> str:
        return self.points[0].cfg.results_dir


def axis_values(overrides: list[str], key: str, default: str) -> tuple[list[int], list[str]]:
    """The integers of ``key=a,b,...`` (``default`` without it), and the other overrides."""
    given = [o for o in overrides if o.partition("=")[0] == key]
    rest = [o for o in overrides if o.partition("=")[0] != key]
    if len(given) > 1:
        raise UserError(f"{key} is given {len(given)} times; give it once, e.g. {key}=1,2")
    text = given[0].partition("=")[2] if given else default
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"{key} takes integers separated by commas, e.g. {key}=0,1,2") from None
    least = 1 if key == "ranks" else 0
    if any(v < least for v in values):
        raise UserError(f"{key} values must be integers >= {least}, got {text}")
    return list(dict.fromkeys(values)), rest


def resolve(
    overrides: list[str], batches: int, warmup: int, tag: str | None = None
) -> InputBenchSpec:
    """Every point's run config, checked before anything is measured (UserError on bad input)."""
    if batches < 1:
        raise UserError(f"--batches must be an integer >= 1, got {batches}")
    if warmup < 0:
        raise UserError(f"--warmup must be an integer >= 0, got {warmup}")
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", tag):
        raise UserError(f"--tag must be a machine name (letters, digits, '_.+-'), got {tag!r}")
    bad = [o for o in overrides if "=" not in o or o.partition("=")[0] in ("workers", "-m")]
    if bad:
        raise UserError(f"input-bench takes KEY=VALUE overrides (ranks=, not workers=): {bad[0]}")
    ranks, rest = axis_values(overrides, "ranks", "1")
    loader_workers, rest = axis_values(rest, "data.loader_workers", "0")
    if any(compose.is_sweep(o) for o in rest):
        raise UserError("only ranks= and data.loader_workers= take several values")
    points = [
        compose.plan(
            [*rest, f"workers={r}", f"data.loader_workers={w}", "mode=ddp"],
            multirun=False,
            writing=False,
        ).specs[0]
        for r in ranks
        for w in loader_workers
    ]
    check_writable(points[0].cfg.results_dir)
    return InputBenchSpec(tuple(points), tuple(rest), batches, warmup, tag)


def take(source: BatchSource, batch: Any) -> None:
    """What a step takes of its batch before computing: for tensors, gathering its samples."""
    if isinstance(source, TensorBatches):
        source.data.train_x[batch]
        source.data.train_y[batch]


def measure_rank(spec: RunSpec, ranks: Ranks, batches: int, warmup: int) -> dict[str, float]:
    """This rank's seconds to its first batch and for ``batches`` timed ones."""
    torch.set_num_threads(spec.threads_per_worker)
    device = distributed.device_for(spec.device, ranks.local_rank, ranks.local_world_size)
    workload = spec.build_workload()
    source = build_source(spec, workload, device, Precision.create(spec.cfg.precision, device))
    steps = source.rank_steps(ranks.world_size, ranks.rank, spec.per_worker_batch, spec.cfg.seed)
    t0 = time.perf_counter()
    take(source, next(steps)[1])
    first = time.perf_counter() - t0
    for _ in range(warmup):
        take(source, next(steps)[1])
    wait_for_device(device)
    t1 = time.perf_counter()
    for _ in range(batches):
        take(source, next(steps)[1])
    wait_for_device(device)
    return {"first_batch_s": first, "elapsed_s": time.perf_counter() - t1}


def point_rank(
    spec: RunSpec, ranks: Ranks, init_method: str, batches: int, warmup: int, out: Path
) -> None:
    """One rank of a point: measured, then the slowest rank's times written by rank 0."""
    if ranks.world_size > 1:
        distributed.init_group("gloo", ranks, init_method, TIMEOUT_S, torch.device("cpu"))
    try:
        mine = measure_rank(spec, ranks, batches, warmup)
        times = [mine["first_batch_s"], mine["elapsed_s"]]
        if ranks.world_size > 1:
            times = distributed.max_across_ranks(times, torch.device("cpu"))
        if ranks.rank == 0:
            out.write_text(json.dumps({"first_batch_s": times[0], "elapsed_s": times[1]}))
    finally:
        if ranks.world_size > 1:
            distributed.shutdown()


def _spawned(local_rank: int, init_method: str, spec: RunSpec, *rest: Any) -> None:
    point_rank(spec, Ranks(local_rank, spec.workers, local_rank, spec.workers), init_method, *rest)


def measure_point(spec: RunSpec, batches: int, warmup: int) -> dict[str, Any]:
    """The row of one point: its ranks started, measured, and their rates."""
    with tempfile.TemporaryDirectory(prefix="dpsuite-input-") as tmp:
        out = Path(tmp, "times.json")
        if spec.workers == 1:
            point_rank(spec, Ranks(0, 1, 0, 1), "", batches, warmup, out)
        else:
            distributed.spawn_local(
                _spawned,
                (spec, batches, warmup, out),
                spec.workers,
                spec.threads_per_worker,
                spec.cfg.ddp.start_method,
                scratch=scratch_dir(spec),
                preload=worker_imports(spec.build_workload()),
            )
        times = json.loads(out.read_text())
    samples = batches * spec.per_worker_batch
    per_rank = samples / times["elapsed_s"]
    return {
        "ranks": spec.workers,
        "loader_workers": spec.cfg.data.loader_workers,
        "per_worker_batch": spec.per_worker_batch,
        "samples_per_s": per_rank * spec.workers,
        "samples_per_s_per_rank": per_rank,
        "batch_time_s": times["elapsed_s"] / batches,
        "first_batch_s": times["first_batch_s"],
    }


HEADER = f"{'ranks':>5} {'loader_workers':>14} {'batch':>6} {'samples/s':>12} "
HEADER += f"{'per rank':>12} {'batch(ms)':>10} {'first(ms)':>10}"


def format_row(row: dict[str, Any]) -> str:
    return (
        f"{row['ranks']:>5} {row['loader_workers']:>14} {row['per_worker_batch']:>6} "
        f"{row['samples_per_s']:>12,.0f} {row['samples_per_s_per_rank']:>12,.0f} "
        f"{1e3 * row['batch_time_s']:>10.3f} {1e3 * row['first_batch_s']:>10.1f}"
    )


def pipeline_of(spec: InputBenchSpec) -> str:
    """datasets, or in memory (loaded once here, as a run's launcher does, and cached)."""
    first = spec.points[0]
    data = data_memo.load_data(first.build_workload(), first.cfg.data.load_timeout_s)
    return "datasets" if isinstance(data, Datasets) else IN_MEMORY


def measured_points(spec: InputBenchSpec, pipeline: str) -> list[RunSpec]:
    """The points to measure: in memory, loader workers do not apply (one per rank count)."""
    if pipeline != IN_MEMORY:
        return list(spec.points)
    return list({p.workers: p for p in reversed(spec.points)}.values())[::-1]


def run(spec: InputBenchSpec) -> int:
    """Measure every point, print its row, write what was measured; 1 when the pipeline failed
    (one line; the points measured before it are written)."""
    command = f"dpsuite input-bench {' '.join(spec.overrides)}"
    rows: list[dict[str, Any]] = []
    with results_lock.for_launcher([spec.results_dir], command):
        started = now_iso()
        try:
            pipeline = pipeline_of(spec)
            points = measured_points(spec, pipeline)
            workload = points[0].workload_label or points[0].cfg.workload.name
            print_header(workload, pipeline, spec.batches)
            for point in points:
                rows.append(measure_point(point, spec.batches, spec.warmup))
                print(format_row(rows[-1]), flush=True)
        except (DataProblem, WorkloadError, distributed.WorkerFailure) as exc:
            print(f"dpsuite: input-bench failed: {str(exc).splitlines()[0]}", file=sys.stderr)
            if rows:
                write(spec, pipeline, workload, rows, started)
            return 1
        write(spec, pipeline, workload, rows, started)
    return 0


def print_header(workload: str, pipeline: str, batches: int) -> None:
    print(f"# input pipeline of {workload} ({pipeline}): {batches} timed batches per rank")
    if pipeline == IN_MEMORY:
        print("# in memory: loader_workers does not apply; measured the index gather")
    print(HEADER, flush=True)


def write(
    spec: InputBenchSpec, pipeline: str, workload: str, rows: list[dict], started: str
) -> None:
    """What was measured, under RESULTS_DIR/input_bench/<machine>-<workload>-<time>/."""
    first = spec.points[0]
    machine = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.tag or socket.gethostname())
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", workload)
    root = Path(spec.results_dir).expanduser() / "input_bench"
    bench_dir = new_result_dir(root, f"{machine}-{name}-{stamp}")
    local = max(p.workers for p in spec.points)
    meta = {
        "bench_id": bench_dir.name,
        "workload": workload,
        "pipeline": pipeline,
        "device": first.device,
        "batches": spec.batches,
        "warmup": spec.warmup,
        "threads_per_worker": first.threads_per_worker,
        "rank_processes": RANK_PROCESSES,
        "overrides": list(spec.overrides),
        "hardware": fingerprint(
            spec.tag, first.backend, local, first.threads_per_worker, usable_cores()
        ),
        "started_at": started,
        "finished_at": now_iso(),
    }
    write_input_bench(bench_dir, meta, rows)
    print(f"# wrote {bench_dir}", flush=True)
