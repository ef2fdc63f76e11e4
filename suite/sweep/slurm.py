"""The SLURM commands a sweep needs: test a submission, read job states, cancel jobs.

Job states come from ``squeue --states=all`` first: the controller keeps a finished job there
for ``MinJobAge`` (5 minutes by default), accounting or not. ``sacct`` is asked only about jobs
squeue no longer lists. A job neither knows has ended (its state unknown; a pending array
element that is cancelled vanishes from both at once), so a missing or broken accounting never
leaves a sweep waiting.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dpsuite.errors import UserError

COMMAND_TIMEOUT_S = 30
# A job in one of these states may still run (or is still ending) on its node.
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
# Pending reasons that no amount of waiting changes: the request exceeds what the partition's
# nodes have, or what the partition, account or QOS allow.
NEVER_REASONS = frozenset(
    {
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "QOSMaxNodePerJobLimit",
        "QOSMaxCpuPerJobLimit",
        "QOSMaxWallDurationPerJobLimit",
        "AssocMaxNodesPerJobLimit",
        "AssocMaxCpuPerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
    }
)


# Pending reasons that say the nodes the job needs are down or drained (a node died): the job
# waits until someone brings them back, which a sweep does not wait for.
NODES_DOWN_REASONS = ("Nodes required for job are DOWN", "ReqNodeNotAvail", "NodeDown")


@dataclass(frozen=True)
class JobState:
    """What SLURM says of one job (``12`` or array element ``12_3``)."""

    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...; UNKNOWN when forgotten
    reason: str = ""  # squeue's reason (pending jobs) or sacct's exit code
    node: str = ""

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def never_runs(self) -> bool:
        return self.state == "PENDING" and self.reason in NEVER_REASONS

    @property
    def waits_for_down_nodes(self) -> bool:
        return self.state == "PENDING" and self.reason.startswith(NODES_DOWN_REASONS)


GONE = JobState("UNKNOWN")


class SlurmUnreachable(RuntimeError):
    """A SLURM command failed for a reason other than the jobs asked about (controller down)."""


CLIENTS = ("sbatch", "srun", "squeue", "scancel")


def available() -> bool:
    """This machine has SLURM's commands (it is a login node of a cluster)."""
    return all(shutil.which(command) for command in CLIENTS)


def require() -> None:
    """UserError unless this machine can submit to SLURM."""
    missing = [command for command in CLIENTS if shutil.which(command) is None]
    if missing:
        raise UserError(
            f"hydra/launcher=slurm needs SLURM's {', '.join(CLIENTS)} on this machine (a login "
            f"node of the cluster); not found on PATH: {', '.join(missing)}"
        )


def _run(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnreachable(f"{args[0]}: {exc}") from None


def error_line(text: str) -> str:
    """The most telling line of a SLURM command's stderr: its last ``error:`` line, else its
    first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    line = errors[-1] if errors else (lines or ["no message"])[0]
    return re.sub(r"^(sbatch|squeue|sacct|scancel|srun): (error: )?", "", line)


def test_submission(script: str) -> None:
    """``sbatch --test-only`` on a batch script: UserError with SLURM's reason if refused."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="dpsuite-test-") as fh:
        fh.write(script)
        fh.flush()
        try:
            done = _run(["sbatch", "--test-only", fh.name])
        except SlurmUnreachable as exc:
            raise UserError(f"cannot reach SLURM to check the jobs: {exc}") from None
    if done.returncode != 0:
        raise UserError(f"SLURM refuses the sweep's jobs: {error_line(done.stderr)}")


def sbatch(script: Path) -> str:
    """Submit a batch script; its job id (UserError with SLURM's reason if refused)."""
    try:
        done = _run(["sbatch", "--parsable", str(script)])
    except SlurmUnreachable as exc:
        raise UserError(f"cannot reach SLURM to submit the job: {exc}") from None
    if done.returncode != 0:
        raise UserError(f"SLURM refuses the job: {error_line(done.stderr)}")
    return done.stdout.strip().split(";")[0]  # "12" or "12;cluster"


def array_ids(job_ids: Iterable[str]) -> list[str]:
    """The distinct job (or array) ids of ``12_0, 12_1, 13`` -> ``12, 13``."""
    return sorted({j.split("_")[0] for j in job_ids}, key=int)


def states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """The state of every job asked about; GONE for those SLURM no longer knows.

    Raises SlurmUnreachable when squeue cannot answer (the caller tries again later).
    """
    wanted = set(job_ids)
    if not wanted:
        return {}
    found = _squeue(array_ids(wanted))
    missing = wanted - found.keys()
    if missing:
        found.update(_sacct(array_ids(missing)))
    return {j: found.get(j, GONE) for j in wanted}


def _squeue(ids: list[str]) -> dict[str, JobState]:
    jobs = f"--jobs={','.join(ids)}"
    done = _run(["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%r|%N", jobs])
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:  # every id asked about is forgotten
            return {}
        raise SlurmUnreachable(f"squeue: {error_line(done.stderr)}")
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            found[parts[0]] = JobState(parts[1], parts[2], parts[3])
    return found


@dataclass(frozen=True)
class QueuePlace:
    """Where a pending job stands: ``position`` of ``pending`` jobs in its partition's queue,
    in the order SLURM considers them (priority, then submission)."""

    position: int
    pending: int
    partition: str


QUEUE_FORMAT = "--format=%i|%P|%Q"


def queue_places(job_ids: Iterable[str]) -> dict[str, QueuePlace]:
    """The queue place of each of these jobs that is pending (every user's jobs count).

    Raises SlurmUnreachable when squeue cannot answer.
    """
    args = ["squeue", "--noheader", "--array", "--states=PENDING", "--sort=-p,i", QUEUE_FORMAT]
    done = _run(args)
    if done.returncode != 0:
        raise SlurmUnreachable(f"squeue: {error_line(done.stderr)}")
    return parse_queue(done.stdout, set(job_ids))


def parse_queue(text: str, wanted: set[str]) -> dict[str, QueuePlace]:
    """Queue places from squeue lines ``JOBID|PARTITION|PRIORITY`` in SLURM's order (highest
    priority first; a job pending in several partitions ``a,b`` counts in each)."""
    queues: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        for partition in parts[1].split(","):
            queues.setdefault(partition, []).append(parts[0])
    places: dict[str, QueuePlace] = {}
    for partition, jobs in queues.items():
        for position, job_id in enumerate(jobs, start=1):
            best = places.get(job_id)
            if job_id in wanted and (best is None or position < best.position):
                places[job_id] = QueuePlace(position, len(jobs), partition)
    return places


def pending_note(states: dict[str, JobState], places: dict[str, QueuePlace]) -> str | None:
    """One line on the sweep's jobs that wait: how many, why (squeue's reasons) and where the
    first of them stands in its queue; None when none waits."""
    waiting = {j: s for j, s in states.items() if s.state == "PENDING"}
    if not waiting:
        return None
    reasons: dict[str, int] = {}
    for state in waiting.values():
        reasons[state.reason or "?"] = reasons.get(state.reason or "?", 0) + 1
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items(), key=lambda r: -r[1]))
    line = f"{len(waiting)} of {len(states)} unfinished SLURM jobs pending ({why})"
    placed = [places[j] for j in waiting if j in places]
    if placed:
        first = min(placed, key=lambda p: p.position)
        line += (
            f"; the first in the queue is {first.position} of {first.pending} in {first.partition}"
        )
    return line


def _sacct(ids: list[str]) -> dict[str, JobState]:
    """Final states from accounting; nothing when there is no accounting."""
    jobs = f"--jobs={','.join(ids)}"
    try:
        fields = "--format=JobID,State,ExitCode,NodeList"
        done = _run(["sacct", "--noheader", "--parsable2", "--allocations", fields, jobs])
    except SlurmUnreachable:
        return {}
    if done.returncode != 0:
        return {}
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4:
            continue
        state = parts[1].split()[0]  # "CANCELLED by 0" -> CANCELLED
        for job_id in expand_job_id(parts[0]):
            found[job_id] = JobState(state, f"exit {parts[2]}", parts[3])
    return found


def expand_job_id(text: str) -> list[str]:
    """sacct's ``12_[0-2,5]`` -> 12_0, 12_1, 12_2, 12_5 (a plain id is itself)."""
    match = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(%\d+)?\]", text)
    if not match:
        return [text]
    ids = []
    for part in match.group(2).split(","):
        first, _, last = part.partition("-")
        ids += [f"{match.group(1)}_{i}" for i in range(int(first), int(last or first) + 1)]
    return ids


def down_nodes(nodelist: str) -> str:
    """Which of ``nodelist`` (``dn[1-2]``) SLURM has marked down, drained or failed, as
    sinfo lists them (``dn2``); '' when none or when sinfo does not answer."""
    if not nodelist:
        return ""
    try:
        done = _run(
            ["sinfo", "--noheader", "--Node", "--states=down,drain,fail", "--format=%N"]
            + [f"--nodes={nodelist}"]
        )
    except SlurmUnreachable:
        return ""
    return ",".join(sorted(set(done.stdout.split()))) if done.returncode == 0 else ""


def cancel(job_ids: Iterable[str]) -> None:
    """Ask SLURM to cancel these jobs (best effort: a job that already ended is no error).

    scancel runs in a session of its own with SIGINT and SIGTERM held back here until it is
    done: another Ctrl-C (the terminal sends it to the whole process group) cannot stop it
    half-way. The signals arrive right after.
    """
    ids = sorted(set(job_ids))
    if not ids:
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        subprocess.run(
            ["scancel", *ids],
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnreachable(f"scancel: {exc}") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
