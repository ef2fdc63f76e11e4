"""A sweep: the runs of one Hydra multirun, with a manifest, resume and a summary.

``dpsuite sweep NAME [overrides...]`` is ``dpsuite run -m +sweep=NAME [overrides...]``: the preset
``suite/conf/sweep/NAME.yaml`` sets values and a grid (``hydra.sweeper.params``), Hydra's sweeper
and launcher run the jobs. Around that, this module

* checks every point before any work starts (``dpsuite.conf.compose``);
* writes ``RESULTS_DIR/sweep.json`` (atomically): preset, overrides, run ids, start and end,
  the status of every run and counts by status, and the SLURM job and log of every run that
  has one, updated as the runs' own run.json files change; an earlier sweep's sweep.json is
  kept beside it as ``sweep-<its start>.json``;
* resumes for free: run ids are stable, complete runs are skipped by ``dpsuite.engine.launch`` and
  everything else (failed, killed half-way, never started) runs again;
* prints one summary line at the end: complete / diverged / failed / skipped, then a table of
  what the runs measured (``dpsuite.sweep.measured``);
* holds the lock of every results directory it writes (``dpsuite.results.lock``), so that a
  second sweep on the same directory is refused instead of racing this one.

A preset with ``parts`` (``demo``) runs other presets in turn, into ``RESULTS_DIR/<part>/``;
an override ``PART/KEY=VALUE`` applies to that part only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from dpsuite import progress
from dpsuite.conf import compose as preflight
from dpsuite.errors import ResultsWriteError, UserError, did_you_mean
from dpsuite.results import (
    SCHEMA_VERSION,
    now_iso,
    read_json,
    read_status,
    write_json_atomic,
)
from dpsuite.results import lock as results_lock
from dpsuite.runtime.ranks import ranks_from_env
from dpsuite.sweep import hydra_app, slurm
from dpsuite.sweep.hydra_app import SubmittedJob
from dpsuite.sweep.measured import final_detail, sweep_table

MANIFEST = "sweep.json"
MANIFEST_SCHEMA = 1
PRESET_GROUP = "sweep"
# Final statuses in the order the summary lists them.
SUMMARY_ORDER = ("complete", "diverged", "failed", "skipped", "not run")


def preset_parts(name: str) -> dict[str, str] | None:
    """The presets a composite preset runs in turn ({subdirectory: preset}), or None."""
    if name not in preflight.preset_names():
        names = preflight.preset_names()
        raise UserError(
            f"unknown sweep '{name}'{did_you_mean(name, names)} (choose from: {', '.join(names)})"
        )
    file = resources.files(preflight.CONFIG_MODULE).joinpath(PRESET_GROUP, f"{name}.yaml")
    raw = OmegaConf.create(file.read_text())
    parts = raw.get("parts")
    return {str(k): str(v) for k, v in parts.items()} if parts else None


def _results_dir_override(overrides: list[str]) -> str | None:
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+") == "results_dir":
            return value
    return None


FINAL = ("complete", "diverged", "failed")


@dataclass
class Sweep:
    """One multirun: what it will run (checked), where its manifest goes, and how its runs stand.

    A run's status in the sweep is what its own run.json says (once that file differs from the
    one found when the sweep started, so that an earlier attempt's record never counts), whether
    the run ran in this process, in spawned workers or in a SLURM job (``refresh``). This is the
    ``SweepObserver`` of ``dpsuite.sweep.hydra_app``.
    """

    preset: str | None
    overrides: list[str]
    plan: preflight.Plan
    runs: dict[str, str] = field(default_factory=dict)  # run_id -> status in this sweep
    run_dirs: dict[str, Path] = field(default_factory=dict)
    specs: dict[str, Any] = field(default_factory=dict)  # run_id -> its RunSpec
    jobs: dict[str, SubmittedJob] = field(default_factory=dict)  # run_id -> its cluster job
    baseline: dict[str, str | None] = field(default_factory=dict)  # run_id -> run.json digest
    launched: set[str] = field(default_factory=set)  # run ids handed to a launcher already
    started_at: str = ""
    manifests_written: set[Path] = field(default_factory=set)  # results dirs written to

    @property
    def hydra_args(self) -> list[str]:
        preset = [f"+{PRESET_GROUP}={self.preset}"] if self.preset else []
        return ["--multirun", *preset, *self.overrides]

    @property
    def label(self) -> str:
        return self.preset or "multirun"

    @property
    def results_dirs(self) -> list[Path]:
        return sorted({p.parent for p in self.run_dirs.values()})

    @classmethod
    def checked(cls, preset: str | None, overrides: list[str], writing: bool = True) -> Sweep:
        """Compose and validate every point (UserError on bad input), before any work."""
        preset_arg = [f"+{PRESET_GROUP}={preset}"] if preset else []
        plan = preflight.plan([*preset_arg, *overrides], multirun=True, writing=writing)
        sweep = cls(preset, list(overrides), plan)
        for spec in plan.specs:  # a run id twice (two spellings of one config) runs once
            sweep.run_dirs.setdefault(spec.run_id, spec.run_dir)
            sweep.specs.setdefault(spec.run_id, spec)
        if plan.launcher.slurm and ranks_from_env() is None:
            from dpsuite.sweep import slurm_launcher

            slurm_launcher.check(plan.launcher.params, plan.specs)
        return sweep

    # ---- the runs' own records ------------------------------------------------------------
    def mark_existing(self) -> int:
        """Note every run.json as found (complete runs will be skipped); returns how many are
        complete."""
        from dpsuite.engine.launch import reusable

        for run_id, run_dir in self.run_dirs.items():
            self.baseline[run_id] = _digest(_read_bytes(run_dir / "run.json"))
            # Jobs on other machines decide there; this machine's fingerprint is no guide.
            done = reusable(self.specs[run_id], this_machine=not self.plan.launcher.remote)
            self.runs[run_id] = "skipped" if done else "pending"
        return sum(s == "skipped" for s in self.runs.values())

    def refresh(self, run_ids: Iterable[str] | None = None, save: bool = True) -> None:
        """Read the run.json of these runs (default: all) and report what changed (and save it
        in the manifest)."""
        changed = False
        for run_id in list(self.runs) if run_ids is None else run_ids:
            if self.runs.get(run_id) not in ("pending", "running"):
                continue
            record = self._new_record(run_id)
            # As written: a job's run that died is marked from its job's end, with the cause.
            status = record.get("status") if record else None
            if status in (*FINAL, "running") and status != self.runs[run_id]:
                self._report(run_id, record, was_pending=self.runs[run_id] == "pending")
                self.runs[run_id] = status
                changed = True
        if changed and save:
            self.write_manifest("running")

    def _new_record(self, run_id: str) -> dict[str, Any] | None:
        """The run's record if it was written in this sweep, else None."""
        data = _read_bytes(self.run_dirs[run_id] / "run.json")
        if data is None or _digest(data) == self.baseline[run_id]:
            return None
        try:
            record = json.loads(data)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def _report(self, run_id: str, record: dict[str, Any], was_pending: bool) -> None:
        """A job's run seen started (also when it started and ended between two looks: it
        still ran somewhere), then a run's final status."""
        status, job = record["status"], self.jobs.get(run_id)
        reporter = progress.current()
        started = was_pending and (status == "running" or record.get("started_at"))
        if started and job is not None:  # a run here shows in the progress bars already
            reporter.note(f"{run_id}: running on {record.get('host')} (job {job.job_id})")
        if status != "running":
            reporter.run_finished(run_id, status, final_detail(record, job.job_id if job else None))

    def finished(self, run_id: str) -> bool:
        return self.runs.get(run_id) not in ("pending", "running")

    def status(self, run_id: str) -> str:
        return self.runs.get(run_id, "pending")

    def mark_failed(self, run_id: str, reason: str) -> None:
        """Record a final `failed` in run.json for a run whose job ended without one."""
        path = self.run_dirs[run_id] / "run.json"
        if self.runs[run_id] == "pending" and read_status(self.run_dirs[run_id]) == "complete":
            self.runs[run_id] = "not run"  # forced again, never started: the result stands
            return
        try:
            record = read_json(path)
        except (OSError, ValueError):  # the job never started the run
            spec = self.specs[run_id]
            record = {
                "schema_version": SCHEMA_VERSION,
                **spec.summary(),
                "config": spec.config,
                "hardware": {},
                "metrics": {},
                "started_at": None,
            }
        record.update(status="failed", error=reason, finished_at=now_iso())
        write_json_atomic(path, record)
        self.refresh([run_id])

    def settle(self, state: str) -> None:
        """Final statuses once Hydra is done: what never started did not run."""
        self.refresh(save=False)  # the caller writes the manifest, with the sweep's end
        for run_id, status in self.runs.items():
            if status == "pending":
                self.runs[run_id] = "not run"
            elif status == "running" and (state == "finished" or run_id not in self.jobs):
                self.runs[run_id] = "failed"  # it cannot run on: only a job may still be ending

    def costs(self) -> dict[str, progress.RunCost]:
        """The expected cost of every run still to do (for the progress ETA)."""
        return {
            r: run_cost(self.specs[r]) for r, status in self.runs.items() if status == "pending"
        }

    # ---- jobs on a cluster ----------------------------------------------------------------
    def launch_specs(self, first: int, count: int) -> list[Any]:
        """The runs of Hydra's jobs first..first+count-1; None where there is nothing to run
        (complete already, or a second spelling of a run id launched before)."""
        specs = self.plan.specs[first : first + count]
        if len(specs) != count:
            raise RuntimeError(f"Hydra launched jobs {first}..{first + count - 1} of {specs}")
        todo: list[Any] = []
        for spec in specs:
            new = self.runs[spec.run_id] != "skipped" and spec.run_id not in self.launched
            self.launched.add(spec.run_id)
            todo.append(spec if new else None)
        return todo

    def jobs_submitted(self, jobs: dict[str, SubmittedJob]) -> None:
        self.jobs.update(jobs)
        reporter = progress.current()
        arrays = slurm.array_ids(j.job_id for j in jobs.values())
        reporter.note(f"submitted {len(jobs)} SLURM jobs (job array {', '.join(arrays)})")
        for run_id, job in jobs.items():
            reporter.note(f"{run_id}: job {job.job_id}, log {job.log_out} (and .err)")
        self.write_manifest("running")

    def refuse_if_jobs_live(self) -> None:
        """UserError while SLURM jobs of an earlier sweep of these directories still live:
        they would write the same run directories as this one."""
        ids = [job_id for d in self.results_dirs for job_id in _manifest_job_ids(d)]
        if not ids or not slurm.available():
            return
        try:
            live = sorted(j for j, s in slurm.states(ids).items() if s.live)
        except slurm.SlurmUnreachable as exc:
            raise UserError(f"cannot check the earlier sweep's SLURM jobs: {exc}") from None
        if live:
            shown = ", ".join(live[:4]) + (", ..." if len(live) > 4 else "")
            raise UserError(
                f"{len(live)} SLURM jobs of an earlier sweep of "
                f"{', '.join(map(str, self.results_dirs))} still run or wait ({shown}); wait for "
                f"them to end or cancel them (scancel {' '.join(slurm.array_ids(live))})"
            )

    # ---- manifest -------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Runs by final status, in summary order."""
        c = Counter("not run" if s == "pending" else s for s in self.runs.values())
        return {k: c[k] for k in sorted(c, key=_summary_rank)}

    def write_manifest(self, state: str) -> None:
        for results_dir in self.results_dirs:
            ids = [i for i, d in self.run_dirs.items() if d.parent == results_dir]
            runs = {i: self.runs.get(i, "pending") for i in ids}
            manifest: dict[str, Any] = {
                "schema_version": MANIFEST_SCHEMA,
                "preset": self.preset,
                "overrides": self.overrides,
                "grid": self.plan.grid,
                "launcher": self.plan.launcher.target,
                "state": state,  # running | finished | interrupted
                "started_at": self.started_at,
                "finished_at": now_iso() if state != "running" else None,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "run_ids": ids,
                "counts": dict(Counter(runs.values())),
                "runs": runs,
                "jobs": {
                    i: {"job_id": j.job_id, "log_out": str(j.log_out), "log_err": str(j.log_err)}
                    for i, j in self.jobs.items()
                    if i in runs
                },
            }
            if results_dir not in self.manifests_written:
                keep_earlier_manifest(results_dir)
                self.manifests_written.add(results_dir)
            write_json_atomic(results_dir / MANIFEST, manifest)

    def summary_line(self, state: str) -> str:
        counts = self.counts()
        parts = [f"{n} {status}" for status, n in counts.items()]
        where = ", ".join(str(d) for d in self.results_dirs)
        return f"sweep {self.label} {state}: {len(self.runs)} runs: {', '.join(parts)} ({where})"

    def measured_table(self) -> str:
        """What the sweep's runs measured (those skipped as complete included), as a table."""
        records = []
        for run_id, status in self.runs.items():
            if status in ("complete", "diverged", "skipped"):
                try:
                    records.append(read_json(self.run_dirs[run_id] / "run.json"))
                except (OSError, ValueError):
                    continue  # gone or damaged since: the summary line counted it
        return sweep_table(r for r in records if isinstance(r, dict))

    # ---- running --------------------------------------------------------------------------
    def run(self) -> int:
        """Run the multirun; returns the exit code (1 when a run failed or did not run)."""
        ranks = ranks_from_env()
        leader = ranks is None or ranks.rank == 0  # under torchrun every rank runs the sweep
        if leader:
            self.refuse_if_jobs_live()
        self.started_at = now_iso()
        done = self.mark_existing()
        if leader:
            self.write_manifest("running")
            progress.current().sweep_started(self.label, len(self.runs), done, self.costs())
        state = "interrupted"
        try:
            hydra_app.run_hydra(self.hydra_args, self if leader else None)
            state = "finished"
        finally:
            if leader:
                self.settle(state)
                try:
                    self.write_manifest(state)
                except ResultsWriteError:
                    if state == "finished":
                        raise  # otherwise the error that stops the sweep is the one to report
                print(self.summary_line(state), flush=True)
                if table := self.measured_table():
                    print(table, flush=True)
        bad = {"failed", "not run"} & set(self.runs.values())
        return 1 if bad else 0


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha1(data).hexdigest()


def keep_earlier_manifest(results_dir: Path) -> Path | None:
    """Move an earlier sweep's sweep.json aside, as sweep-<its start, UTC>.json, before this
    sweep writes its own: the history of the directory's sweeps (commands, grids, statuses,
    SLURM jobs) is kept. Returns where it went (None: there was none)."""
    current = results_dir / MANIFEST
    if not current.is_file():
        return None
    try:
        started = str(read_json(current).get("started_at") or "")
    except (OSError, ValueError, AttributeError):
        started = ""
    stamp = "".join(ch for ch in started[:19] if ch.isalnum()) or "unknown"
    stamp = stamp if stamp == "unknown" else stamp + "Z"
    target = results_dir / f"sweep-{stamp}.json"
    n = 1
    while target.exists():
        n += 1
        target = results_dir / f"sweep-{stamp}-{n}.json"
    try:
        os.replace(current, target)
    except OSError as exc:
        raise ResultsWriteError(target, exc) from None
    return target


def _manifest_job_ids(results_dir: Path) -> list[str]:
    """The SLURM job ids an earlier sweep recorded in this directory's manifest."""
    try:
        jobs = read_json(results_dir / MANIFEST).get("jobs") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return [str(j["job_id"]) for j in jobs.values() if isinstance(j, dict) and "job_id" in j]


def run_cost(spec: Any) -> progress.RunCost:
    """A run's work: workers x the steps its config asks for, of its shape."""
    shape = (spec.cfg.workload.name, spec.cfg.mode, spec.per_worker_batch, spec.workers)
    return progress.RunCost(shape, float(spec.workers * spec.expected_steps))


def _summary_rank(status: str) -> int:
    return SUMMARY_ORDER.index(status) if status in SUMMARY_ORDER else len(SUMMARY_ORDER)


def planned(preset: str | None, overrides: list[str], writing: bool = True) -> list[Sweep]:
    """Every sweep the command would run, each point checked: one, or a composite preset's
    parts in turn (into RESULTS_DIR/<part>/). ``writing=False``: nothing is created."""
    parts = preset_parts(preset) if preset else None
    if parts is None:
        return [Sweep.checked(preset, overrides, writing)]
    assert preset is not None
    root = composite_results_dir(preset, overrides)
    rest = [o for o in overrides if _results_dir_override([o]) is None]
    return [
        Sweep.checked(
            part,
            [*part_overrides(rest, subdir, parts), f"results_dir={Path(root) / subdir}"],
            writing,
        )
        for subdir, part in parts.items()
    ]


def part_overrides(overrides: list[str], subdir: str, parts: dict[str, str]) -> list[str]:
    """A composite preset's overrides for one part: the shared ones, and those written
    ``PART/KEY=VALUE`` for this part (its models' own keys: ``resnet50/workload.arch=resnet18``)."""
    out = []
    for o in overrides:
        prefix, slash, rest = o.lstrip("+").partition("/")
        if slash and prefix in parts:
            if prefix == subdir:
                out.append(("+" if o.startswith("+") else "") + rest)
            continue
        out.append(o)
    return out


def run_sweep(
    preset: str | None, overrides: list[str], seconds: dict[str, float] | None = None
) -> int:
    """`dpsuite sweep NAME ...` (and `dpsuite run -m ...` with ``preset=None``).

    ``seconds``, when given, receives each part's wall time under its preset's name."""
    command = shlex.join(["dpsuite", *(["sweep", preset] if preset else ["run", "-m"]), *overrides])
    sweeps = planned(preset, overrides)  # every part checked before the first one starts
    code = 0
    dirs = [d for sweep in sweeps for d in sweep.results_dirs]
    with results_lock.for_launcher(dirs, command), progress.activated(progress.for_terminal()):
        for sweep in sweeps:
            started = time.perf_counter()
            code = max(code, sweep.run())
            if seconds is not None:
                seconds[sweep.label] = time.perf_counter() - started
    return code


def composite_results_dir(preset: str, overrides: list[str]) -> str:
    """Where a composite preset's parts go: ``results_dir=`` if given, else the preset's."""
    given = _results_dir_override(overrides)
    if given:
        return given
    file = resources.files(preflight.CONFIG_MODULE).joinpath(PRESET_GROUP, f"{preset}.yaml")
    return str(OmegaConf.create(file.read_text()).get("results_dir", f"results/{preset}"))
