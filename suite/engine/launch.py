"""Start or join the N ranks of one run, and make sure its run.json ends in a final status."""

from __future__ import annotations

import contextlib
import sys

import torch

from suite import progress
from suite.conf.run_spec import RunSpec, usable_cores
from suite.engine import data_memo
from suite.engine import distributed as dd
from suite.engine.distributed import Ranks
from suite.errors import ResultsWriteError
from suite.measure.fingerprint import fingerprint
from suite.results import RunWriter, read_json, read_status

SKIPPED = "skipped"


def base_record(spec: RunSpec, local_workers: int) -> dict:
    procs = 1 if spec.mode == "simulated" else local_workers
    hardware = fingerprint(
        spec.hardware_tag, spec.backend, procs, spec.threads_per_worker, usable_cores()
    )
    return {**spec.summary(), "config": spec.config, "hardware": hardware, "metrics": {}}


def already_complete(spec: RunSpec) -> bool:
    return not spec.force and read_status(spec.run_dir) == "complete"


def launch(spec: RunSpec) -> str:
    """Run ``spec`` here: join existing ranks, run in this process, or spawn workers."""
    joined = dd.ranks_from_env()
    if joined is not None:
        return join_existing(spec, joined)
    if already_complete(spec):
        print(f"{spec.run_id}: already complete in {spec.run_dir}, skipped (force=true reruns it)")
        return SKIPPED
    writer = RunWriter(spec.run_dir)
    writer.start(base_record(spec, spec.workers))
    try:
        if spec.workers == 1 or spec.mode == "simulated":
            return run_rank(spec, Ranks(0, 1, 0, 1), init_method=None)
        with progress.relay_from_children():
            return spawn(spec, writer)
    except ResultsWriteError:
        raise  # not a failure of this run: nothing more can be written (the caller stops)
    except Exception as exc:
        # A failed run is a result of the sweep, not the end of it: record it and go on.
        return after_failure(spec, writer, describe(exc))


def join_existing(spec: RunSpec, ranks: Ranks) -> str:
    """Under torchrun or srun: the ranks exist, so join their process group."""
    dd.slurm_master_env()
    skip = [False]
    if ranks.rank == 0:
        skip[0] = already_complete(spec)
        if not skip[0]:
            RunWriter(spec.run_dir).start(base_record(spec, ranks.local_world_size))
    device = dd.device_for(spec.device, ranks.local_rank)
    dd.init_group(spec.backend, ranks, "env://", spec.timeout_s)
    torch.distributed.broadcast_object_list(skip, src=0)
    if skip[0]:
        dd.shutdown()
        if ranks.rank == 0:
            print(f"{spec.run_id}: already complete in {spec.run_dir}, skipped")
        return SKIPPED
    return run_rank(spec, ranks, init_method=None, device=device)


def run_rank(
    spec: RunSpec, ranks: Ranks, init_method: str | None, device: torch.device | None = None
) -> str:
    """One rank's whole life: group, training, final status, clean teardown."""
    from suite.engine.train import train

    device = device or dd.device_for(spec.device, ranks.local_rank)
    if init_method is not None:
        dd.init_group(spec.backend, ranks, init_method, spec.timeout_s)
    writer = None
    if ranks.rank == 0:
        writer = RunWriter(spec.run_dir)
        writer.record = read_json(writer.run_json)
    try:
        status = train(spec, ranks, device, writer)
    except BaseException as exc:
        if writer is not None:
            # Mark it failed if the disk lets us; a run.json left 'running' reads as stale.
            with contextlib.suppress(ResultsWriteError):
                writer.finish("failed", error=describe(exc))
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        raise
    dd.shutdown()
    return status


def describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def _spawned(local_rank: int, init_method: str, spec: RunSpec) -> None:
    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    run_rank(spec, ranks, init_method)


def spawn(spec: RunSpec, writer: RunWriter) -> str:
    """Start ``spec.workers`` processes on this host and supervise them until they end."""
    data_memo.load_data(spec.build_workload())  # generate/cache the data once, not per rank
    try:
        dd.spawn_local(_spawned, (spec,), spec.workers, spec.threads_per_worker, spec.start_method)
    except dd.WorkerFailure as exc:
        return after_failure(spec, writer, str(exc))
    except BaseException:
        with contextlib.suppress(ResultsWriteError):  # the interrupt is what to report
            after_failure(spec, writer, "interrupted")
        raise
    return read_status(spec.run_dir) or "failed"


def after_failure(spec: RunSpec, writer: RunWriter, reason: str) -> str:
    """A worker failed. A run that had already written its final status keeps it."""
    status = read_status(spec.run_dir)
    if status in ("complete", "diverged"):
        print(
            f"warning: {spec.run_id}: a worker exited abnormally after the run finished ({reason})",
            file=sys.stderr,
        )
        return status
    writer.record = read_json(writer.run_json)
    if writer.record.get("status") == "running" or "died" in reason:
        writer.finish("failed", error=reason)
    print(f"{spec.run_id}: failed: {writer.record.get('error') or reason}", file=sys.stderr)
    return "failed"
