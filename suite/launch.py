"""Start or join the N ranks of one run, and make sure its run.json ends in a final status."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

from suite import distributed as dd
from suite import progress
from suite.distributed import Ranks
from suite.fingerprint import fingerprint
from suite.results import RunWriter, read_json, read_status
from suite.run_spec import RunSpec, usable_cores

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
    from suite.train import train

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


def _spawned(local_rank: int, spec: RunSpec, init_method: str) -> None:
    die_with_parent()
    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    run_rank(spec, ranks, init_method)


def die_with_parent() -> None:
    """Linux: have the kernel send SIGTERM to this worker if its launcher dies (even SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before we asked
        os._exit(1)


def spawn(spec: RunSpec, writer: RunWriter) -> str:
    """Start ``spec.workers`` processes on this host and supervise them until they end.

    A worker that dies or raises stops its siblings at once (they would otherwise wait in a
    collective until the process-group timeout); an interrupt of the launcher stops them too.
    """
    # Each child picks the thread count up at import; set it before they start.
    os.environ["OMP_NUM_THREADS"] = str(spec.threads_per_worker)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this host
    spec.build_workload().load_data()  # generate/cache the data once, not once per rank
    with tempfile.TemporaryDirectory(prefix="dpsuite-store-") as tmp:
        init_method = Path(tmp, "store").as_uri()
        ctx = mp.start_processes(
            _spawned,
            args=(spec, init_method),
            nprocs=spec.workers,
            start_method=spec.start_method,
            join=False,
        )
        try:
            while not ctx.join(timeout=1.0, grace_period=STOP_GRACE_S):
                pass
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            return after_failure(spec, writer, failure_reason(ctx.processes, exc))
        except BaseException:
            stop_workers(ctx.processes)
            after_failure(spec, writer, "interrupted")
            raise
    return read_status(spec.run_dir) or "failed"


STOP_GRACE_S = 5.0


def failure_reason(processes, exc: Exception) -> str:
    """Name the root cause: a worker killed by a signal, else the first error raised."""
    import signal

    killed = [
        (i, p.exitcode)
        for i, p in enumerate(processes)
        if p.exitcode is not None and p.exitcode < 0 and -p.exitcode != signal.SIGTERM
    ]
    raised = ""
    if isinstance(exc, mp.ProcessRaisedException):
        raised = f"rank {exc.error_index}: {str(exc).strip().splitlines()[-1][:200]}"
    if not killed:
        return raised or f"worker {exc.error_index} exited with code {exc.exit_code}"
    i, code = killed[0]
    reason = f"worker {i} died ({signal.Signals(-code).name})"
    return f"{reason}; then {raised}" if raised else reason


def stop_workers(processes) -> None:
    """SIGTERM every live worker, then SIGKILL what is left after a grace period."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(STOP_GRACE_S)
        if p.is_alive():
            p.kill()
            p.join()


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
