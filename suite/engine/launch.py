"""Start or join the N ranks of one run, and make sure its run.json ends in a final status.

A complete result is reused (the run is skipped) only when it was measured on this machine
with the same config, every key that changes what is measured or recorded included. A result
that is not reused is never destroyed before its replacement exists: a new attempt over a
complete or diverged result writes beside it (``RESULTS_DIR/.attempts/<run_id>/``) and takes
its place only when it ends complete or diverged. An attempt that fails, or is killed, leaves
the previous result where it was (and itself in ``.attempts/`` to look at).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dpsuite import progress
from dpsuite.conf.run_spec import RunSpec
from dpsuite.engine import data_memo
from dpsuite.errors import ResultsWriteError
from dpsuite.measure import caveats
from dpsuite.measure.fingerprint import fingerprint
from dpsuite.results import RunWriter, effective_status, read_json, read_status
from dpsuite.results.liveness import keep_beating
from dpsuite.results.store import ATTEMPTS_DIR, SCRATCH_DIR
from dpsuite.runtime import distributed, rendezvous
from dpsuite.runtime.host import usable_cores
from dpsuite.runtime.ranks import Ranks, ranks_from_env
from dpsuite.workloads.base import Workload

SKIPPED = "skipped"
# Config keys that say where results go and how processes start, not what a run measures: a
# complete result stays valid whatever they are.
VOLATILE_KEYS = (
    "results_dir",
    "force",
    "cache_dir",
    "ddp.start_method",
    "ddp.timeout_s",
    "data.load_timeout_s",
    "data.timeout_s",
)
KEPT_STATUSES = ("complete", "diverged")


def base_record(spec: RunSpec) -> dict:
    """run.json as a run starts: its summary, config and the fingerprint of this machine."""
    hardware = fingerprint(
        spec.cfg.hardware.tag, spec.backend, spec.processes, spec.threads_per_worker, usable_cores()
    )
    return {**spec.summary(), "config": spec.config, "hardware": hardware, "metrics": {}}


def read_record(run_dir: Path) -> dict[str, Any] | None:
    try:
        rec = read_json(run_dir / "run.json")
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def config_difference(recorded: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """The first key (dotted) whose value differs, outside the volatile keys; None if none."""

    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(d, dict):
            return {prefix.rstrip("."): d}
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}."))
        return out

    a, b = flat(recorded), flat(wanted)
    for key in sorted(a.keys() | b.keys()):
        if key.startswith(VOLATILE_KEYS) or a.get(key) == b.get(key):
            continue
        return f"{key}={a.get(key)!r} there, {b.get(key)!r} now"
    return None


def reuse_blocker(
    spec: RunSpec, previous: dict[str, Any] | None, machine_id: str | None
) -> str | None:
    """Why the result in the run directory cannot stand for this run (None: reuse it).
    ``machine_id`` None: the run will start on another machine, which decides for itself."""
    if previous is None:
        return "no result yet"
    status = effective_status(previous)
    if spec.cfg.force:
        return "force=true"
    if status != "complete":
        return f"the result there is {status}"
    recorded = (previous.get("hardware") or {}).get("machine_id")
    if machine_id is not None and recorded != machine_id:
        host = (previous.get("hardware") or {}).get("hostname")
        return f"the result there was measured on another machine ({host})"
    difference = config_difference(previous.get("config") or {}, spec.config)
    return f"the result there differs: {difference}" if difference else None


def reusable(spec: RunSpec, this_machine: bool = True) -> bool:
    """Whether ``spec`` would be skipped because its complete result stands (on this machine,
    or, with ``this_machine=False``, wherever it was measured)."""
    machine = base_record(spec)["hardware"]["machine_id"] if this_machine else None
    return reuse_blocker(spec, read_record(spec.run_dir), machine) is None


@dataclass
class Attempt:
    """Where one attempt at a run writes, and how it takes the run directory's place."""

    run_dir: Path
    dir: Path
    previous: str | None  # status of a result kept until this attempt replaces it

    @classmethod
    def beside(cls, spec: RunSpec, previous: dict[str, Any] | None) -> Attempt:
        status = effective_status(previous) if previous else None
        if status not in KEPT_STATUSES:  # nothing worth keeping: write in place
            return cls(spec.run_dir, spec.run_dir, None)
        where = spec.run_dir.parent / ATTEMPTS_DIR / spec.run_id
        try:
            shutil.rmtree(where, ignore_errors=True)  # an older attempt's leftovers
        except OSError as exc:
            raise ResultsWriteError(where, exc) from None
        return cls(spec.run_dir, where, status)

    def settle(self, status: str, run_id: str) -> str:
        """Put a finished attempt in place of the previous result, or keep the previous one."""
        if self.dir == self.run_dir:
            return status
        if status not in KEPT_STATUSES:
            print(
                f"{run_id}: this attempt {status}; the previous {self.previous} result is kept "
                f"(the attempt is in {self.dir})",
                file=sys.stderr,
            )
            return status
        replaced = self.dir.with_name(self.dir.name + ".replaced")
        try:
            shutil.rmtree(replaced, ignore_errors=True)
            os.replace(self.run_dir, replaced)
            os.replace(self.dir, self.run_dir)
            shutil.rmtree(replaced, ignore_errors=True)
        except OSError as exc:
            raise ResultsWriteError(self.run_dir, exc) from None
        print(f"{run_id}: {status}; it replaced the previous {self.previous} result")
        return status


def launch(spec: RunSpec) -> str:
    """Run ``spec`` here: join existing ranks, run in this process, or spawn workers."""
    joined = ranks_from_env()
    if joined is not None:
        return join_existing(spec, joined)
    record = base_record(spec)
    previous = read_record(spec.run_dir)
    blocker = reuse_blocker(spec, previous, record["hardware"]["machine_id"])
    if blocker is None:
        print(f"{spec.run_id}: already complete in {spec.run_dir}, skipped (force=true reruns it)")
        return SKIPPED
    caveats.announce(spec.run_id, record["hardware"])
    attempt = Attempt.beside(spec, previous)
    writer = RunWriter(attempt.dir)
    writer.start(record)
    try:
        if spec.processes == 1:
            status = run_rank(spec, attempt.dir, Ranks(0, 1, 0, 1), init_method=None)
        else:
            with progress.relay_from_children(scratch_dir(spec)):
                status = spawn(spec, attempt.dir, writer)
    except ResultsWriteError:
        raise  # not a failure of this run: nothing more can be written (the caller stops)
    except (Exception, SystemExit) as exc:  # SystemExit: a workload's own sys.exit()
        # A failed run is a result of the sweep, not the end of it: record it and go on.
        status = after_failure(spec, writer, describe(exc))
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (scancel) may land anywhere after `running` was written, even
        # before a rank's own handler is in place (while it imports the training loop).
        # Marked quietly: the command's own line (`dpsuite: interrupted`) is the one said.
        with contextlib.suppress(ResultsWriteError):
            after_failure(spec, writer, "interrupted", say=False)
        raise
    return attempt.settle(status, spec.run_id)


def join_existing(spec: RunSpec, ranks: Ranks) -> str:
    """Under torchrun or srun: the ranks exist, so join their process group."""
    distributed.slurm_master_env()
    decision: list[Any] = [None, None]  # [skip, the attempt's directory], decided by rank 0
    attempt, writer = None, None
    device = distributed.device_for(spec.device, ranks.local_rank, ranks.local_world_size)
    # From `running` on, whatever stops this rank before run_rank (an error, an interrupt) is
    # recorded by the `try` below: nothing may sit between the two.
    if ranks.rank == 0:
        record = base_record(spec)
        previous = read_record(spec.run_dir)
        skip = reuse_blocker(spec, previous, record["hardware"]["machine_id"]) is None
        if not skip:
            caveats.announce(spec.run_id, record["hardware"])
            attempt = Attempt.beside(spec, previous)
            writer = RunWriter(attempt.dir)
            writer.start(record)
        decision = [skip, str(attempt.dir) if attempt else None]
    try:
        distributed.init_group(spec.backend, ranks, "env://", spec.cfg.ddp.timeout_s, device)
        torch.distributed.broadcast_object_list(decision, src=0)
        if not decision[0]:
            record_nodes(spec, ranks, writer)
    except BaseException as exc:  # the other ranks never came, or an interrupt: say why
        if writer is not None:
            writer.finish("failed", error=describe(exc))
        raise
    if decision[0]:
        distributed.shutdown()
        if ranks.rank == 0:
            print(f"{spec.run_id}: already complete in {spec.run_dir}, skipped")
        return SKIPPED
    status = run_rank(spec, Path(decision[1]), ranks, init_method=None, device=device)
    return attempt.settle(status, spec.run_id) if attempt else status


def node_entry(spec: RunSpec, ranks: Ranks) -> dict[str, Any]:
    """This rank's host as run.json's ``hardware.nodes`` lists it."""
    hw = base_record(spec)["hardware"]
    keys = (
        "hostname",
        "machine_id",
        "kernel_boot_id",
        "cpu",
        "cpu_count",
        "cpus_usable",
        "cpus_allocated",
        "accelerator",
    )
    return {
        **{k: hw.get(k) for k in keys},
        "workers_per_host": ranks.local_world_size,
        "interface": os.environ.get("GLOO_SOCKET_IFNAME"),
        "address": rendezvous.interface_address(os.environ.get("GLOO_SOCKET_IFNAME")),
        "rank": ranks.rank,
    }


def record_nodes(spec: RunSpec, ranks: Ranks, writer: RunWriter | None) -> None:
    """Every host's fingerprint in run.json (``hardware.nodes``, one entry per host with its
    ranks): rank 0's own fingerprint says nothing of the other nodes."""
    entries: list[Any] = [None] * ranks.world_size
    torch.distributed.all_gather_object(entries, node_entry(spec, ranks))
    if writer is None:
        return
    nodes: dict[str, dict[str, Any]] = {}
    for entry in entries:
        rank = entry.pop("rank")
        nodes.setdefault(entry["hostname"], {**entry, "ranks": []})["ranks"].append(rank)
    writer.update(hardware={**writer.record["hardware"], "nodes": list(nodes.values())})


def run_rank(
    spec: RunSpec,
    run_dir: Path,
    ranks: Ranks,
    init_method: str | None,
    device: torch.device | None = None,
) -> str:
    """One rank's whole life: group, training, final status, clean teardown."""
    from dpsuite.engine.train import train

    device = device or distributed.device_for(spec.device, ranks.local_rank, ranks.local_world_size)
    if init_method is not None:
        distributed.init_group(spec.backend, ranks, init_method, spec.cfg.ddp.timeout_s, device)
    writer = None
    if ranks.rank == 0:
        writer = RunWriter(run_dir)
        writer.record = read_json(writer.run_json)
    try:
        with keep_beating(writer):  # an epoch can be longer than a heartbeat's staleness
            status = train(spec, ranks, device, writer, run_dir)
    except BaseException as exc:
        if writer is not None:
            # Mark it failed if the disk lets us; a run.json left 'running' reads as stale.
            # Across nodes, a peer's address in the error is named as its ranks and node.
            nodes = writer.record.get("hardware", {}).get("nodes") or []
            with contextlib.suppress(ResultsWriteError):
                writer.finish("failed", error=rendezvous.name_peer(describe(exc), nodes))
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        raise
    distributed.shutdown()
    return status


def scratch_dir(spec: RunSpec) -> Path:
    """Temporary files of this run's processes: under its results directory."""
    return Path(spec.cfg.results_dir).expanduser().absolute() / SCRATCH_DIR


def describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):  # a worker whose launcher ended says so
        return str(exc) or "interrupted"
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


def _spawned(local_rank: int, init_method: str, spec: RunSpec, run_dir: Path) -> None:
    ranks = Ranks(local_rank, spec.workers, local_rank, spec.workers)
    run_rank(spec, run_dir, ranks, init_method)


def worker_imports(workload: Workload) -> tuple[str, ...]:
    """What every training worker imports as it sets up, for its launcher's forkserver to
    import once: torch._dynamo (DDP's constructor and the FLOP counter import it, about 1.3 s
    of a worker's start on a 2-core VM), the workload's module and its in-function imports."""
    return ("torch._dynamo", type(workload).__module__, *workload.worker_imports)


def spawn(spec: RunSpec, run_dir: Path, writer: RunWriter) -> str:
    """Start ``spec.workers`` processes on this host and supervise them until they end."""
    workload = spec.build_workload()
    with keep_beating(writer):  # a download can take long; the workers beat once started
        # generate/cache the data once, not per rank; a workload that cannot load fails here
        data_memo.load_data(workload, spec.cfg.data.load_timeout_s)
    try:
        distributed.spawn_local(
            _spawned,
            (spec, run_dir),
            spec.workers,
            spec.threads_per_worker,
            spec.cfg.ddp.start_method,
            scratch=scratch_dir(spec),
            preload=worker_imports(workload),
        )
    except distributed.WorkerFailure as exc:
        return after_failure(spec, writer, str(exc))
    status = read_status(run_dir)
    if status in (None, "running"):  # every worker exited 0, none wrote how the run ended
        return after_failure(spec, writer, "the workers exited before the run finished")
    return status


def after_failure(spec: RunSpec, writer: RunWriter, reason: str, say: bool = True) -> str:
    """A worker failed. A run that had already written its final status keeps it."""
    status = read_status(writer.dir)
    if status in KEPT_STATUSES:
        print(
            f"warning: {spec.run_id}: a worker exited abnormally after the run finished ({reason})",
            file=sys.stderr,
        )
        return status
    writer.record = read_json(writer.run_json)
    if writer.record.get("status") == "running" or reason != writer.record.get("error"):
        # The launcher names the first cause (the worker that stopped or was signalled
        # first); a worker's own last word may be a consequence of it.
        writer.finish("failed", error=reason)
    if say:
        print(f"{spec.run_id}: failed: {reason}", file=sys.stderr)
    return "failed"
