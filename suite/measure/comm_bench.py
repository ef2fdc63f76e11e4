"""`dpsuite comm-bench`: an all-reduce microbenchmark in the spirit of nccl-tests' all_reduce_perf.

Definitions are nccl-tests' (doc/PERFORMANCE.md). For a message of S bytes all-reduced by n ranks
in t seconds: algbw = S / t, and busbw = algbw * 2(n-1)/n, the rate each rank's link must sustain
(a ring all-reduce sends and receives 2(n-1)/n * S per rank), which is comparable across n. GB/s
are 1e9 bytes/s. The time t is the mean over ``iters`` back-to-back in-place sum all-reduces on
each rank, after ``warmup`` untimed ones, then the max across ranks (the slowest rank).

Correctness (nccl-tests' ``-c``): before timing, every size is all-reduced once from a known
pattern, x_r[i] = ((i + r) mod 4) + 1 on rank r, and every element of the result is compared with
the exact sum; the ``errors`` column counts wrong elements over all ranks. The pattern's partial
sums are small integers, exact in fp32, and in bf16 up to 64 ranks.
"""

from __future__ import annotations

import re
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from suite.conf.run_spec import check_writable, resolve_backend, usable_cores
from suite.engine import distributed as dd
from suite.engine.distributed import Ranks
from suite.errors import UserError
from suite.measure.fingerprint import fingerprint
from suite.measure.step_timer import wait_for_device
from suite.results import COMM_BENCH_JSON, now_iso, read_json, write_comm_bench

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Relative tolerance of the correctness check (exact sums are expected; this absorbs rounding
# of partial sums in bf16 beyond 64 ranks).
TOLERANCE = {"fp32": 1e-6, "bf16": 1e-2}
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
PATTERN_PERIOD = 4
CHUNK = 1 << 20  # elements handled at a time when filling and checking (bounded memory)
DEFAULT_SIZES = "1K:256M"
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class BenchSpec:
    """A validated comm-bench invocation."""

    workers: int
    sizes: tuple[int, ...]
    dtype: str
    warmup: int
    iters: int
    backend: str
    device: str
    results_dir: str
    tag: str | None
    threads_per_worker: int


# ---- sizes and bandwidths ------------------------------------------------------------------


def parse_size(text: str) -> int:
    """'4096', '1K', '64M', '1G' (binary units, an optional 'B' or 'iB') -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise UserError(f"cannot read size '{text}' (use e.g. 4096, 1K, 64M, 1G)")
    return int(m.group(1)) * UNITS[m.group(2)]


def parse_sizes(text: str, factor: int) -> tuple[int, ...]:
    """'1K:256M' (every factor-th size from 1K to 256M) or a comma list '1K,1M,64M'."""
    if factor < 2:
        raise UserError(f"--factor must be an integer >= 2, got {factor}")
    if ":" in text:
        lo_text, _, hi_text = text.partition(":")
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if lo < 1 or hi < lo:
            raise UserError(f"size range '{text}' must go from a positive size up")
        sizes = []
        while lo <= hi:
            sizes.append(lo)
            lo *= factor
        return tuple(sizes)
    sizes = tuple(parse_size(t) for t in text.split(",") if t.strip())
    if not sizes:
        raise UserError(f"no sizes in '{text}'")
    return sizes


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) for one all-reduce of ``size_bytes``."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(world_size)


# ---- correctness ---------------------------------------------------------------------------


def fill_pattern(buf: torch.Tensor, rank: int) -> None:
    """x_r[i] = ((i + r) mod 4) + 1."""
    for start in range(0, buf.numel(), CHUNK):
        end = min(start + CHUNK, buf.numel())
        i = torch.arange(start, end, device=buf.device)
        buf[start:end] = ((i + rank) % PATTERN_PERIOD + 1).to(buf.dtype)


def expected_sums(world_size: int) -> torch.Tensor:
    """The exact all-reduced value at positions i = 0..3 (mod 4), in float64."""
    return torch.tensor(
        [
            sum((k + r) % PATTERN_PERIOD + 1 for r in range(world_size))
            for k in range(PATTERN_PERIOD)
        ],
        dtype=torch.float64,
    )


def count_wrong(result: torch.Tensor, world_size: int, dtype: str) -> int:
    """How many elements of an all-reduced pattern differ from the exact sum."""
    expect = expected_sums(world_size).to(result.device)
    wrong = 0
    for start in range(0, result.numel(), CHUNK):
        end = min(start + CHUNK, result.numel())
        want = expect[torch.arange(start, end, device=result.device) % PATTERN_PERIOD]
        got = result[start:end].to(torch.float64)
        ok = torch.isclose(got, want, rtol=TOLERANCE[dtype], atol=0.0)
        wrong += int((~ok).sum())
    return wrong


# ---- validation ----------------------------------------------------------------------------


def resolve(
    workers: int,
    sizes: str,
    factor: int,
    dtype: str,
    warmup: int,
    iters: int,
    backend: str,
    results_dir: str,
    tag: str | None,
    world_size: int | None = None,
    local_world_size: int | None = None,
) -> BenchSpec:
    """Check every argument before any process starts. Raises UserError on bad input."""
    if world_size is not None:  # under torchrun/srun the job decides the world size
        workers = world_size
    if workers < 1:
        raise UserError(f"--workers must be an integer >= 1, got {workers}")
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got '{dtype}'")
    if warmup < 0:
        raise UserError(f"--warmup must be an integer >= 0, got {warmup}")
    if iters < 1:
        raise UserError(f"--iters must be an integer >= 1, got {iters}")
    elem = DTYPES[dtype].itemsize
    parsed = parse_sizes(sizes, factor)
    for s in parsed:
        if s < elem or s % elem:
            raise UserError(f"size {s} bytes is not a positive multiple of {elem} ({dtype})")
    local = local_world_size or workers
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = resolve_backend(backend, "cuda" if gpus else "cpu")
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda" and local > gpus:
        raise UserError(f"--workers={local} but only {gpus} CUDA device(s): one GPU per rank")
    check_writable(results_dir)
    return BenchSpec(
        workers=workers,
        sizes=parsed,
        dtype=dtype,
        warmup=warmup,
        iters=iters,
        backend=backend,
        device=device,
        results_dir=results_dir,
        tag=tag,
        threads_per_worker=max(1, usable_cores() // local),
    )


# ---- measurement ---------------------------------------------------------------------------


def measure_size(size: int, spec: BenchSpec, ranks: Ranks, device: torch.device) -> dict[str, Any]:
    """Check, then time, the all-reduce of one message size; the row of the results table."""
    count = size // DTYPES[spec.dtype].itemsize
    buf = torch.empty(count, dtype=DTYPES[spec.dtype], device=device)
    fill_pattern(buf, ranks.rank)
    dist.all_reduce(buf)
    wrong = count_wrong(buf, ranks.world_size, spec.dtype)
    buf.fill_(1)
    for _ in range(spec.warmup):
        dist.all_reduce(buf)
    wait_for_device(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(spec.iters):
        dist.all_reduce(buf)
    wait_for_device(device)
    elapsed = (time.perf_counter() - t0) / spec.iters
    t = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    errors = torch.tensor([wrong], dtype=torch.float64, device=device)
    dist.all_reduce(errors)
    time_s = float(t)
    algbw, busbw = bandwidths(size, time_s, ranks.world_size)
    return {
        "size_bytes": size,
        "count": count,
        "dtype": spec.dtype,
        "time_us": time_s * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": busbw,
        "errors": int(errors),
    }


HEADER = (
    f"{'size(B)':>12} {'count':>11} {'type':>5} {'time(us)':>11} "
    f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}"
)


def format_row(row: dict[str, Any]) -> str:
    return (
        f"{row['size_bytes']:>12} {row['count']:>11} {row['dtype']:>5} {row['time_us']:>11.1f} "
        f"{row['algbw_GBps']:>12.3f} {row['busbw_GBps']:>12.3f} {row['errors']:>7}"
    )


def bench_dir_for(spec: BenchSpec, hostname: str) -> Path:
    """A new directory name: machine, backend, world size, dtype and UTC time."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    machine = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.tag or hostname)
    base = f"{machine}-{spec.backend}-w{spec.workers}-{spec.dtype}-{stamp}"
    root = Path(spec.results_dir).expanduser() / "comm_bench"
    path, n = root / base, 1
    while path.exists():
        n += 1
        path = root / f"{base}-{n}"
    return path


def run_rank(spec: BenchSpec, ranks: Ranks, init_method: str, bench_dir: Path | None) -> None:
    """One rank of the benchmark; rank 0 prints the table and writes the results."""
    torch.set_num_threads(spec.threads_per_worker)
    device = dd.device_for(spec.device, ranks.local_rank)
    dd.init_group(spec.backend, ranks, init_method, TIMEOUT_S)
    try:
        started = now_iso()
        if ranks.rank == 0:
            print(
                f"# all_reduce (sum, in place): {ranks.world_size} ranks, {spec.backend}, "
                f"warmup {spec.warmup}, iters {spec.iters}",
                flush=True,
            )
            print(HEADER, flush=True)
        rows = []
        for size in spec.sizes:
            rows.append(measure_size(size, spec, ranks, device))
            if ranks.rank == 0:
                print(format_row(rows[-1]), flush=True)
        if ranks.rank == 0:
            bench_dir = bench_dir or bench_dir_for(spec, socket.gethostname())
            write_results(spec, ranks, rows, started, bench_dir)
    finally:
        dd.shutdown()


def write_results(
    spec: BenchSpec, ranks: Ranks, rows: list[dict[str, Any]], started: str, bench_dir: Path
) -> None:
    hardware = fingerprint(
        spec.tag, spec.backend, ranks.local_world_size, spec.threads_per_worker, usable_cores()
    )
    meta = {
        "bench_id": bench_dir.name,
        "op": "all_reduce",
        "reduce_op": "sum",
        "world_size": ranks.world_size,
        "backend": spec.backend,
        "device": spec.device,
        "dtype": spec.dtype,
        "warmup": spec.warmup,
        "iters": spec.iters,
        "sizes": list(spec.sizes),
        "time_definition": "mean per all-reduce over iters on each rank, max across ranks",
        "busbw_factor": bus_factor(ranks.world_size),
        "threads_per_worker": spec.threads_per_worker,
        "errors_total": sum(r["errors"] for r in rows),
        "config": asdict(spec) | {"sizes": list(spec.sizes)},
        "hardware": hardware,
        "started_at": started,
        "finished_at": now_iso(),
    }
    write_comm_bench(bench_dir, meta, rows)
    big = [r["busbw_GBps"] for r in rows if r["size_bytes"] >= 2**20]
    if big:
        print(f"# avg busbw (sizes >= 1 MiB): {sum(big) / len(big):.3f} GB/s")
    verdict = "OK" if not meta["errors_total"] else "WRONG RESULTS"
    print(f"# wrong values: {meta['errors_total']} {verdict}")
    print(f"# wrote {bench_dir}", flush=True)


def _spawned(local_rank: int, init_method: str, spec: BenchSpec, bench_dir: Path) -> None:
    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    run_rank(spec, ranks, init_method, bench_dir)


def run(spec: BenchSpec) -> int:
    """Start (or join) the ranks and run the benchmark.

    Exit code: 0, or 1 when a rank failed or any reduced value was wrong.
    """
    joined = dd.ranks_from_env()
    if joined is not None:
        dd.slurm_master_env()
        run_rank(spec, joined, "env://", None)
        return 0
    bench_dir = bench_dir_for(spec, socket.gethostname())
    try:
        if spec.workers == 1:
            with tempfile.TemporaryDirectory(prefix="dpsuite-store-") as tmp:
                run_rank(spec, Ranks(0, 1, 0, 1), Path(tmp, "store").as_uri(), bench_dir)
        else:
            dd.spawn_local(_spawned, (spec, bench_dir), spec.workers, spec.threads_per_worker)
    except dd.WorkerFailure as exc:
        print(f"dpsuite: comm-bench failed: {exc}", file=sys.stderr)
        return 1
    return 1 if read_json(bench_dir / COMM_BENCH_JSON).get("errors_total") else 0
