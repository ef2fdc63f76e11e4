"""A run or sweep as one SLURM batch job: the script written out, submitted, followed later.

`dpsuite sbatch` writes the batch script of a ``dpsuite run``/``dpsuite sweep`` command (for a
colleague to submit by hand), or submits it and returns at once (``--submit``): the command then
runs inside its job, on the allocated node, so nothing needs to stay alive on the login node.
Submitting the same command again resumes the sweep (complete runs are skipped), once the
earlier job has ended. `dpsuite sweep --status DIR` reads what the job and the sweep's own
manifests (sweep.json) say.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from dpsuite.errors import UserError
from dpsuite.results.store import now_iso, replace_atomically
from dpsuite.sweep import runner, slurm

RECORD = "sbatch.json"  # in the results directory: the jobs submitted for it, latest last
DEFAULT_TIME_MIN = 60


@dataclass(frozen=True)
class BatchCommand:
    """A dpsuite command to run in a batch job, checked, and the directory its results go to."""

    args: list[str]  # after `dpsuite`: run ... or sweep NAME ...
    results_dir: Path
    label: str
    runs: int


def checked(args: list[str]) -> BatchCommand:
    """Every point of ``run``/``sweep`` ``args`` composed and checked now (UserError on bad
    input), so that a mistake is said here and not in a job's log an hour later."""
    if not args or args[0] not in ("run", "sweep"):
        raise UserError("sbatch: give the command to run: run [-m] KEY=VALUE ... or sweep NAME ...")
    flags = [a for a in args[1:] if a.startswith("-") and a not in ("-m", "--multirun")]
    if flags:
        raise UserError(f"sbatch: {flags[0]} cannot be run in a batch job")
    overrides = [a for a in args[1:] if not a.startswith("-")]
    preset = None
    if args[0] == "sweep":
        if not overrides:
            raise UserError("sbatch sweep: give the sweep's NAME")
        preset, overrides = overrides[0], overrides[1:]
    sweeps = runner.planned(preset, overrides, writing=False)
    dirs = [str(d.resolve()) for s in sweeps for d in s.results_dirs]
    root = Path(os.path.commonpath(dirs))
    runs = sum(len(s.run_dirs) for s in sweeps)
    return BatchCommand(list(args), root, preset or args[0], runs)


def batch_script(command: BatchCommand, time_min: int, options: list[str]) -> str:
    """The sbatch script that runs ``command`` in one job on one node (the whole node by
    default, so that timings are never shared with another job)."""
    sbatch = [
        f"--job-name=dpsuite-{command.label}",
        f"--output={command.results_dir}/slurm-%j.out",
        f"--chdir={Path.cwd()}",
        "--nodes=1",
        "--ntasks=1",
        "--exclusive",
        f"--time={time_min}",
        *options,  # later options win over the defaults above
    ]
    run = shlex.join([sys.executable, "-m", "dpsuite", *command.args])
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {o}" for o in sbatch),
            "#",
            "# Written by `dpsuite sbatch`. Submit it with `sbatch THIS_FILE`; follow it with",
            f"#   dpsuite sweep --status {shlex.quote(str(command.results_dir))}",
            "# Submitting it again resumes the sweep: complete runs are skipped.",
            f"exec {run}",
            "",
        ]
    )


def make_results_dir(command: BatchCommand) -> None:
    """The results directory, where SLURM opens the job's log before the job starts."""
    try:
        command.results_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {command.results_dir}: {exc.strerror}") from None


def write_script(script: str, path: Path) -> None:
    try:
        replace_atomically(path, script.encode())
        path.chmod(0o755)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None


def submit(command: BatchCommand, script: str) -> str:
    """sbatch the script (after refusing while an earlier job for the directory lives);
    returns the job id and records it in RESULTS_DIR/sbatch.json."""
    slurm.require()
    live = [j for j, s in slurm.states(recorded_jobs(command.results_dir)).items() if s.live]
    if live:
        raise UserError(
            f"SLURM job {live[-1]} of {command.results_dir} still runs or waits: follow it with "
            f"`dpsuite sweep --status {command.results_dir}`, or cancel it (scancel {live[-1]})"
        )
    make_results_dir(command)
    path = command.results_dir / ".sbatch-script.sh"
    write_script(script, path)
    done = slurm.sbatch(path)
    _record(command, done)
    return done


def recorded_jobs(results_dir: Path) -> list[str]:
    return [j["job_id"] for j in _read_record(results_dir).get("jobs", [])]


def _read_record(results_dir: Path) -> dict:
    try:
        return json.loads((results_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def _record(command: BatchCommand, job_id: str) -> None:
    record = _read_record(command.results_dir)
    jobs = [*record.get("jobs", []), {"job_id": job_id, "command": command.args}]
    jobs[-1]["submitted_at"] = now_iso()
    text = json.dumps({"jobs": jobs}, indent=2) + "\n"
    try:
        replace_atomically(command.results_dir / RECORD, text.encode())
    except OSError as exc:
        raise UserError(f"job {job_id} submitted, but cannot record it: {exc.strerror}") from None


def status_lines(results_dir: Path) -> list[str]:
    """What the directory's batch job and sweeps say now, one line each (and one per run)."""
    if not results_dir.is_dir():
        raise UserError(f"{results_dir}: no such directory")
    job_line, job_ended = _job_line(results_dir)
    lines = [job_line]
    manifests = sorted(p for p in results_dir.rglob("sweep.json") if ".hydra" not in p.parts)
    if not manifests:
        lines.append(f"{results_dir}: no sweep has started here yet")
    for path in manifests:
        shown, state = _manifest_lines(path)
        lines += shown
        if job_ended and state != "finished":  # time limit, scancel, a lost node
            lines.append(
                "  its job ended before the sweep finished: submit the same command again to "
                "resume (complete runs are skipped)"
            )
    return lines


def _job_line(results_dir: Path) -> tuple[str, bool]:
    """The line on the directory's last batch job, and whether that job has ended."""
    jobs = recorded_jobs(results_dir)
    if not jobs:
        return f"{results_dir}: no batch job submitted by `dpsuite sbatch --submit`", False
    job_id = jobs[-1]
    try:
        state = slurm.states([job_id])[job_id]
    except slurm.SlurmUnreachable as exc:
        return f"SLURM job {job_id}: state unknown ({exc})", False
    where = f" on {state.node}" if state.node and state.state != "PENDING" else ""
    why = f" ({state.reason})" if state.state == "PENDING" and state.reason else ""
    log = f"{results_dir}/slurm-{job_id}.out"
    return f"SLURM job {job_id}: {state.state}{where}{why}; log {log}", not state.live


def _manifest_lines(path: Path) -> tuple[list[str], str | None]:
    """A sweep's line and its runs' lines, and the sweep's state (running, finished, ...)."""
    try:
        manifest = json.loads(path.read_text())
        runs: dict[str, str] = dict(manifest["runs"])
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{path}: unreadable"], None
    counts: dict[str, int] = {}
    for status in runs.values():
        counts[status] = counts.get(status, 0) + 1
    shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    label = manifest.get("preset") or "multirun"
    head = f"sweep {label} in {path.parent}: {manifest.get('state')}, {len(runs)} runs: {shown}"
    lines = [head, *(f"  {run_id}: {status}" for run_id, status in runs.items())]
    return lines, manifest.get("state")
