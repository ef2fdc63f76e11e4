"""`dpsuite comm-bench`: collective microbenchmarks in the spirit of nccl-tests' *_perf tools.

Definitions are nccl-tests' (doc/PERFORMANCE.md; per collective in ``collectives``). For a
message of S bytes in t seconds on n ranks: algbw = S / t, and busbw = algbw x the collective's
factor (all_reduce 2(n-1)/n), comparable across n. GB/s are 1e9 bytes/s. The time t is the mean
over ``iters`` back-to-back collectives on each rank, after ``warmup`` untimed ones, then the max
across ranks (the slowest rank).

Correctness (nccl-tests' ``-c``): before timing, every size runs once from a known pattern and
every element of every rank's output is compared with what it must be; the ``errors`` column
counts wrong elements over all ranks.

Memory is checked before any process starts: the buffers of the largest message, on every rank
of this host, must fit in what the host (MemAvailable) or each GPU (free memory) has.
"""

from __future__ import annotations

import contextlib
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

from dpsuite.errors import UserError
from dpsuite.measure.collectives import CHUNK, COLLECTIVES, ROOT, Collective, count_wrong
from dpsuite.measure.fingerprint import fingerprint, kernel_boot_id
from dpsuite.results import COMM_BENCH_JSON, now_iso, read_json, write_comm_bench
from dpsuite.results import lock as results_lock
from dpsuite.results.gate import TAG_PATTERN
from dpsuite.results.store import new_result_dir
from dpsuite.runtime import distributed, host_memory
from dpsuite.runtime.host import check_writable, resolve_backend, usable_cores, wait_for_device
from dpsuite.runtime.ranks import Ranks, ranks_from_env

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Relative tolerance of the correctness check (exact sums are expected; this absorbs rounding
# of partial sums in bf16 beyond 64 ranks).
TOLERANCE = {"fp32": 1e-6, "bf16": 1e-2}
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
DEFAULT_SIZES = "1K:256M"
DEFAULT_COLLECTIVE = "all_reduce"
TIMEOUT_S = 600.0
# Temporaries of the correctness check per rank: a chunk of indices, expected and received
# values (float64) and their comparison.
CHECK_BYTES = CHUNK * 40
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class BenchSpec:
    """A validated comm-bench invocation."""

    workers: int
    collectives: tuple[str, ...]
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


def sizes_text(sizes: str | None, minbytes: str | None, maxbytes: str | None) -> str:
    """The sizes to parse: --sizes, or the range nccl-tests' -b/-e give (the other end from the
    default range when one is missing)."""
    if sizes is not None and (minbytes or maxbytes):
        raise UserError("give --sizes or -b/-e (--minbytes/--maxbytes), not both")
    if sizes is not None:
        return sizes
    lo, _, hi = DEFAULT_SIZES.partition(":")
    return f"{minbytes or lo}:{maxbytes or hi}"


def parse_collectives(text: str) -> tuple[str, ...]:
    """'all_reduce', 'all_gather,broadcast' or 'all' -> the collectives' names, in that order."""
    names = list(COLLECTIVES) if text.strip() == "all" else [t.strip() for t in text.split(",")]
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown or not names:
        raise UserError(
            f"--collective: unknown '{','.join(unknown) or text}' "
            f"(choose from {', '.join(COLLECTIVES)}, or all)"
        )
    return tuple(dict.fromkeys(names))


def bus_factor(world_size: int, collective: str = DEFAULT_COLLECTIVE) -> float:
    """nccl-tests' bus bandwidth factor of a collective (all_reduce: 2(n-1)/n)."""
    return COLLECTIVES[collective].bus_factor(world_size)


def bandwidths(
    size_bytes: int, time_s: float, world_size: int, collective: str = DEFAULT_COLLECTIVE
) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) for one collective on a message of ``size_bytes``."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_factor(world_size, collective)


# ---- validation ----------------------------------------------------------------------------


def checked_sizes(
    sizes: str, factor: int, dtype: str, names: tuple[str, ...], workers: int
) -> list[int]:
    """The message sizes in bytes: whole elements, and one element per rank where split."""
    elem = DTYPES[dtype].itemsize
    parsed = parse_sizes(sizes, factor)
    for s in parsed:
        if s < elem or s % elem:
            raise UserError(f"size {s} bytes is not a positive multiple of {elem} ({dtype})")
    split = [n for n in names if COLLECTIVES[n].split]
    if split and min(parsed) < workers * elem:
        raise UserError(
            f"size {min(parsed)} bytes is too small for {split[0]} on {workers} ranks: it needs "
            f"one {dtype} element per rank, at least {workers * elem} bytes"
        )
    return parsed


def bench_device(backend: str, local: int) -> tuple[str, str]:
    """The backend and device for ``local`` ranks on this host: one GPU per rank under NCCL."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = resolve_backend(backend, "cuda" if gpus else "cpu")
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda" and local > gpus:
        raise UserError(f"--workers={local} but only {gpus} CUDA device(s): one GPU per rank")
    return backend, device


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
    collectives: str = DEFAULT_COLLECTIVE,
    local_rank: int | None = None,
) -> BenchSpec:
    """Check every argument before any process starts. Raises UserError on bad input.

    ``local_rank``: this process's rank on its host when it is one rank of a torchrun/srun job
    (it then checks its own GPU's memory only); None when the benchmark starts its ranks.
    """
    if world_size is not None:  # under torchrun/srun the job decides the world size
        workers = world_size
    if workers < 1:
        raise UserError(f"--workers must be an integer >= 1, got {workers}")
    names = parse_collectives(collectives)
    if tag is not None and not TAG_PATTERN.fullmatch(tag):
        raise UserError(
            f"--tag must be a machine name (letters, digits, '_', '.', '+', '-'), got {tag!r}"
        )
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got '{dtype}'")
    if warmup < 0:
        raise UserError(f"--warmup must be an integer >= 0, got {warmup}")
    if iters < 1:
        raise UserError(f"--iters must be an integer >= 1, got {iters}")
    parsed = checked_sizes(sizes, factor, dtype, names, workers)
    local = local_world_size or workers
    backend, device = bench_device(backend, local)
    check_memory(names, parsed, workers, local, device, local_rank)
    check_writable(results_dir)
    return BenchSpec(
        workers=workers,
        collectives=names,
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


# ---- memory --------------------------------------------------------------------------------


def mem_available() -> int | None:
    """The host's MemAvailable in bytes (None where /proc/meminfo has none)."""
    return host_memory.mem_available(MEMINFO)


human_size = host_memory.human_size


def check_memory(
    names: tuple[str, ...],
    sizes: tuple[int, ...],
    world: int,
    local: int,
    device: str,
    local_rank: int | None,
) -> None:
    """Refuse sizes whose buffers, on every rank of this host, do not fit in free memory.

    Sizes run one after another, so the largest buffer set of any collective is what counts:
    per rank on a GPU (each rank has its own), times the host's ranks in host memory.
    """
    need, name = max(
        (COLLECTIVES[n].buffer_bytes(max(sizes), world) + CHECK_BYTES, n) for n in names
    )
    footprint = 0
    if device == "cuda":
        # Asking creates this process's CUDA context on each GPU; what is free is measured
        # after it, so the context this command holds is accounted for.
        ranks = [local_rank] if local_rank is not None else range(local)
        available = min(torch.cuda.mem_get_info(r)[0] for r in ranks)
        where, total = "free on a GPU", need
    else:
        # Each rank is a process that has imported torch before its first buffer: measured.
        footprint = host_memory.rank_footprint() if local_rank is None else 0
        available = mem_available()
        where, total = "available (MemAvailable)", (need + footprint) * local
    if available is None or total <= available:
        return
    process = f" + {human_size(footprint)} for its process" if footprint else ""
    per_host = f" x {local} ranks on this host = {human_size(total)}" if device == "cpu" else ""
    raise UserError(
        f"messages of {human_size(max(sizes))} do not fit in memory: {name} needs "
        f"{human_size(need)} per rank{process}{per_host}, {human_size(available)} {where}; "
        "lower the largest size (--sizes or -e) or --workers"
    )


# ---- measurement ---------------------------------------------------------------------------


def measure_size(
    collective: Collective, size: int, spec: BenchSpec, ranks: Ranks, device: torch.device
) -> dict[str, Any]:
    """Check, then time, one collective on one message size; the row of the results table."""
    world, dtype = ranks.world_size, DTYPES[spec.dtype]
    count = collective.count(size, dtype.itemsize, world)
    inp, out = collective.buffers(count, world, ranks.rank, dtype, device)
    collective.run(out, inp)
    wrong = count_wrong(collective, out, ranks.rank, world, count // world, TOLERANCE[spec.dtype])
    if out is inp:
        inp.zero_()  # repeated in-place sums of zeros stay finite, however many iterations
    for _ in range(spec.warmup):
        collective.run(out, inp)
    wait_for_device(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(spec.iters):
        collective.run(out, inp)
    wait_for_device(device)
    elapsed = (time.perf_counter() - t0) / spec.iters
    t = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    errors = torch.tensor([wrong], dtype=torch.float64, device=device)
    dist.all_reduce(errors)
    time_s, size_bytes = float(t), count * dtype.itemsize
    algbw, busbw = bandwidths(size_bytes, time_s, world, collective.name)
    return {
        "collective": collective.name,
        "size_bytes": size_bytes,
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
    """A new directory, created here so that no other writer can take its name: machine,
    backend, world size, dtype and UTC time (``-2``, ``-3``, ... when that name is taken)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    machine = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.tag or hostname)
    base = f"{machine}-{spec.backend}-w{spec.workers}-{spec.dtype}-{stamp}"
    return new_result_dir(Path(spec.results_dir).expanduser() / "comm_bench", base)


PLACEMENT = {
    "all_reduce": "sum, in place",
    "all_gather": "out of place",
    "reduce_scatter": "sum, out of place",
    "broadcast": f"root {ROOT}, in place",
    "all_to_all": "out of place",
}


def run_rank(spec: BenchSpec, ranks: Ranks, init_method: str, bench_dir: Path | None) -> None:
    """One rank of the benchmark; rank 0 prints the tables and writes the results."""
    torch.set_num_threads(spec.threads_per_worker)
    device = distributed.device_for(spec.device, ranks.local_rank, ranks.local_world_size)
    distributed.init_group(spec.backend, ranks, init_method, TIMEOUT_S, device)
    try:
        started = now_iso()
        rows = []
        for name in spec.collectives:
            if ranks.rank == 0:
                print(
                    f"# {name} ({PLACEMENT[name]}): {ranks.world_size} ranks, {spec.backend}, "
                    f"warmup {spec.warmup}, iters {spec.iters}",
                    flush=True,
                )
                print(HEADER, flush=True)
            for size in spec.sizes:
                rows.append(measure_size(COLLECTIVES[name], size, spec, ranks, device))
                if ranks.rank == 0:
                    print(format_row(rows[-1]), flush=True)
        kernels = ranks_kernels(ranks.world_size)
        if ranks.rank == 0:
            bench_dir = bench_dir or bench_dir_for(spec, socket.gethostname())
            write_results(spec, ranks, rows, started, bench_dir, kernels)
    finally:
        distributed.shutdown()


def ranks_kernels(world_size: int) -> int:
    """The distinct kernels (boot ids) the ranks run on: fewer than the nodes where nodes are
    namespaces or containers of one host (every rank takes part)."""
    ids: list[Any] = [None] * world_size
    dist.all_gather_object(ids, kernel_boot_id())
    return len(set(ids))


def write_results(
    spec: BenchSpec,
    ranks: Ranks,
    rows: list[dict[str, Any]],
    started: str,
    bench_dir: Path,
    kernels: int | None = None,
) -> None:
    hardware = fingerprint(
        spec.tag, spec.backend, ranks.local_world_size, spec.threads_per_worker, usable_cores()
    )
    hardware["kernels"] = kernels
    meta = {
        "bench_id": bench_dir.name,
        "collectives": list(spec.collectives),
        "reduce_op": "sum",
        "broadcast_root": ROOT,
        "world_size": ranks.world_size,
        "backend": spec.backend,
        "device": spec.device,
        "dtype": spec.dtype,
        "warmup": spec.warmup,
        "iters": spec.iters,
        "sizes": list(spec.sizes),
        "time_definition": "mean per collective over iters on each rank, max across ranks",
        "busbw_factors": {n: bus_factor(ranks.world_size, n) for n in spec.collectives},
        "threads_per_worker": spec.threads_per_worker,
        "errors_total": sum(r["errors"] for r in rows),
        "config": asdict(spec) | {"sizes": list(spec.sizes), "collectives": list(spec.collectives)},
        "hardware": hardware,
        "started_at": started,
        "finished_at": now_iso(),
    }
    write_comm_bench(bench_dir, meta, rows)
    for name in spec.collectives:
        mine = [r for r in rows if r["collective"] == name]
        big = [r["busbw_GBps"] for r in mine if r["size_bytes"] >= 2**20]
        if spec.workers == 1:  # nothing crosses between ranks: nccl-tests prints 0 too
            print(f"# {name}: 1 rank, no bus bandwidth (it needs 2 or more ranks)")
        elif big:
            print(f"# {name}: avg busbw (sizes >= 1 MiB): {sum(big) / len(big):.3f} GB/s")
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
    joined = ranks_from_env()
    if joined is not None:
        distributed.slurm_master_env()
        run_rank(spec, joined, "env://", None)
        return 0
    command = (
        f"dpsuite comm-bench --workers {spec.workers} --collective {','.join(spec.collectives)} "
        f"--results-dir {spec.results_dir}"
    )
    # One command per results directory: a benchmark beside a running sweep would measure
    # the sweep's contention, and the sweep would be slowed by it.
    with results_lock.for_launcher([spec.results_dir], command):
        bench_dir = bench_dir_for(spec, socket.gethostname())
        try:
            if spec.workers == 1:
                with tempfile.TemporaryDirectory(prefix="dpsuite-store-") as tmp:
                    run_rank(spec, Ranks(0, 1, 0, 1), Path(tmp, "store").as_uri(), bench_dir)
            else:
                distributed.spawn_local(
                    _spawned, (spec, bench_dir), spec.workers, spec.threads_per_worker
                )
        except distributed.WorkerFailure as exc:
            print(f"dpsuite: comm-bench failed: {exc}", file=sys.stderr)
            return 1
        finally:
            with contextlib.suppress(OSError):
                bench_dir.rmdir()  # only when nothing was written into it
    return 1 if read_json(bench_dir / COMM_BENCH_JSON).get("errors_total") else 0
