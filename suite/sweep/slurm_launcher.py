"""`hydra/launcher=slurm`: a sweep's runs as one SLURM job array, followed until each has ended.

Built on hydra-submitit-launcher (the job side: a job runs one Hydra job, i.e. one run) with
dpsuite's own submission and monitoring:

* resources that fit the runs: ``cpus_per_task`` left null means enough cores for a job's
  workers x threads (or, with ``exclusive``, the whole node, which is the default so that
  timings are never shared with another job);
* every submission error, and a request SLURM can never schedule, ends the command with one
  line; ``sbatch --test-only`` checks the request before the sweep starts;
* jobs are followed through ``squeue``/``sacct`` (``dpsuite.sweep.slurm``) and the runs through
  their own run.json (the sweep's ``SweepObserver``): a job that ends without a final status
  (killed, cancelled, out of time, lost) has its run marked failed with the reason within a poll
  or two, and the sweep goes on;
* Ctrl-C or SIGTERM of the command cancels its jobs and waits for them to end, so that a rerun
  never races them.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides

from dpsuite import progress
from dpsuite.errors import CommandAborted, ResultsWriteError, UserError
from dpsuite.sweep import hydra_app, slurm
from dpsuite.sweep.hydra_app import SubmittedJob, SweepObserver
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

# Keys of conf/hydra/launcher/slurm.yaml that submitit knows under their generic names (the
# others go to its SLURM executor as slurm_<key>), and dpsuite's own keys.
GENERIC_KEYS = {
    "timeout_min",
    "cpus_per_task",
    "gpus_per_node",
    "tasks_per_node",
    "mem_gb",
    "nodes",
    "name",
    "stderr_to_stdout",
}
EXECUTOR_INIT_KEYS = {"submitit_folder", "max_num_timeout"}
OWN_KEYS = {"poll_s"}
END_GRACE_S = 3.0  # a job seen ended this long ago has had its last write land
CANCEL_WAIT_S = 90.0  # after scancel: SLURM's KillWait (30 s by default) and some
UNREACHABLE_LIMIT_S = 600.0  # give up following jobs after this long without squeue
NEVER_EXPLAINED = {
    "PartitionConfig": "it asks for more than any node of the partition has",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit exceeds the partition's",
}


def cpus_needed(spec: Any, tasks: int) -> int:
    """Cores one task of a run's job needs: its processes x threads per worker (default 1).
    A job of several tasks (per node, or one on each of several nodes) has one rank a task."""
    procs = 1 if tasks > 1 else spec.processes
    return procs * int(spec.config.get("threads_per_worker") or 1)


def job_parameters(params: dict[str, Any], specs: Sequence[Any]) -> dict[str, Any]:
    """The launcher's parameters with dpsuite's resource defaults filled in for these runs."""
    params = dict(params)
    if params.get("exclusive") is False:  # submitit would write `--exclusive=False`
        params["exclusive"] = None
    if params.get("cpus_per_task") is None and not params.get("exclusive"):
        tasks = int(params.get("tasks_per_node") or 1) * int(params.get("nodes") or 1)
        params["cpus_per_task"] = max(cpus_needed(s, tasks) for s in specs)
    return params


def make_executor(params: dict[str, Any], specs: Sequence[Any]):
    """submitit's SLURM executor, set up as hydra-submitit-launcher would with ``params``."""
    import submitit

    executor = submitit.AutoExecutor(
        cluster="slurm",
        folder=params["submitit_folder"],
        slurm_max_num_timeout=params.get("max_num_timeout", 0),
    )
    skip = EXECUTOR_INIT_KEYS | OWN_KEYS
    executor.update_parameters(
        **{
            key if key in GENERIC_KEYS else f"slurm_{key}": value
            for key, value in job_parameters(params, specs).items()
            if key not in skip
        }
    )
    return executor


def batch_script(params: dict[str, Any], specs: Sequence[Any]) -> str:
    """The sbatch script of the job array that would run ``specs``."""
    executor = make_executor(params, specs)._executor
    executor.parameters["map_count"] = len(specs)  # as submitit's map_array does
    return executor._make_submission_file_text(executor._submitit_command_str, "check")


def check(params: dict[str, Any], specs: Sequence[Any]) -> None:
    """Before the sweep starts: SLURM is here and would accept the jobs (UserError if not)."""
    slurm.require()
    try:
        script = batch_script(params, specs)
    except (ValueError, TypeError) as exc:  # a parameter submitit does not know or accept
        raise UserError(f"hydra.launcher: {str(exc).splitlines()[0]}") from None
    slurm.test_submission(script)


class SlurmLauncher(BaseSubmititLauncher):
    """hydra-submitit-launcher's SLURM launcher, with dpsuite's submission and monitoring."""

    _EXECUTOR = "slurm"

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        sweep = hydra_app.observer()
        if sweep is None:  # only `dpsuite run -m` / `dpsuite sweep` follow what they submit
            raise CommandAborted(UserError("hydra/launcher=slurm needs `dpsuite run -m`"))
        specs = sweep.launch_specs(initial_job_idx, len(job_overrides))
        todo = [(i, spec) for i, spec in enumerate(specs) if spec is not None]
        if todo:
            jobs = self.submit(job_overrides, initial_job_idx, todo)
            JobWatch(sweep, jobs, float(self.params.get("poll_s", 5))).run()
        return [
            self.job_return(overrides, sweep, spec)
            for overrides, spec in zip(job_overrides, specs, strict=True)
        ]

    def submit(
        self, job_overrides: Sequence[Sequence[str]], first: int, todo: list[tuple[int, Any]]
    ) -> dict[str, SubmittedJob]:
        """One job array for the runs in ``todo``; {run_id: its job}."""
        from submitit.core.utils import UncompletedJobError

        assert self.config is not None
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        state = Singleton.get_state()
        args = [
            (list(job_overrides[i]), "hydra.sweep.dir", first + i, f"job_id_for_{first + i}", state)
            for i, _ in todo
        ]
        stderr = io.StringIO()  # submitit prints sbatch's stderr: the one line below says it
        try:
            with contextlib.redirect_stderr(stderr):
                executor = make_executor(self.params, [spec for _, spec in todo])
                submitted = executor.map_array(self, *zip(*args, strict=True))
        except (UncompletedJobError, RuntimeError, OSError, ValueError) as exc:
            reason = slurm.error_line(stderr.getvalue() or str(exc))
            raise CommandAborted(UserError(f"SLURM refused the sweep's jobs: {reason}")) from None
        return {
            spec.run_id: SubmittedJob(job.job_id, Path(job.paths.stdout), Path(job.paths.stderr))
            for (_, spec), job in zip(todo, submitted, strict=True)
        }

    @staticmethod
    def job_return(overrides: Sequence[str], sweep: SweepObserver, spec: Any) -> JobReturn:
        """What Hydra's sweeper expects back; the outcome itself is in the run's run.json."""
        ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
        ret.return_value = sweep.status(spec.run_id) if spec is not None else "skipped"
        ret.task_name = " ".join(filter_overrides(overrides))
        return ret


class NeverRuns(Exception):
    """A job pends for a reason no amount of waiting changes."""

    def __init__(self, job: SubmittedJob, state: slurm.JobState) -> None:
        why = NEVER_EXPLAINED.get(state.reason, "SLURM says it can never run")
        super().__init__(
            f"SLURM can never start job {job.job_id} ({state.reason}: {why}); the sweep's jobs "
            "were cancelled: ask for fewer tasks, CPUs, GPUs or less memory per node "
            "(hydra.launcher.*), or another partition"
        )


class JobWatch:
    """Follows a sweep's SLURM jobs until every run has a final status in its run.json."""

    def __init__(self, sweep: SweepObserver, jobs: dict[str, SubmittedJob], poll_s: float):
        self.sweep = sweep
        self.jobs = jobs
        self.poll_s = poll_s
        self.ended: dict[str, float] = {}  # run_id -> when its job was first seen ended
        self.unreachable_since: float | None = None
        self.last_pending: str | None = None  # the last line on waiting jobs, not repeated

    def run(self) -> None:
        """Until every run has ended; cancels the jobs if it ends otherwise."""
        try:
            self.sweep.jobs_submitted(self.jobs)
            while open_jobs := self.open_jobs():
                self.check(open_jobs)
                time.sleep(self.poll_s)
            with contextlib.suppress(slurm.SlurmUnreachable):  # every run has ended anyway
                self.report_live(wait_until_gone([j.job_id for j in self.jobs.values()]))
        except NeverRuns as exc:  # the runs never started: nothing to mark
            self.cancel(self.unfinished(), mark=False)
            raise CommandAborted(UserError(str(exc))) from None
        except ResultsWriteError as exc:  # nothing more can be recorded: stop, as a local sweep
            self.cancel(self.unfinished(), mark=False)
            raise CommandAborted(exc) from None
        except BaseException:  # Ctrl-C, SIGTERM, or an error that ends the command
            self.cancel(self.unfinished(), "the sweep was interrupted")
            raise

    def open_jobs(self) -> dict[str, SubmittedJob]:
        """The jobs whose runs have no final status yet, as their run.json files say now."""
        self.sweep.refresh(list(self.jobs))
        return self.unfinished()

    def unfinished(self) -> dict[str, SubmittedJob]:
        return {r: j for r, j in self.jobs.items() if not self.sweep.finished(r)}

    def check(self, open_jobs: dict[str, SubmittedJob]) -> None:
        states = self.states(open_jobs)
        if states is None:
            return
        self.note_pending(states)
        for job in open_jobs.values():
            if states[job.job_id].never_runs:
                raise NeverRuns(job, states[job.job_id])
        blocked = {r: j for r, j in open_jobs.items() if states[j.job_id].waits_for_down_nodes}
        if blocked:
            self.unschedulable(blocked, states[next(iter(blocked.values())).job_id].reason)
        now = time.monotonic()
        for run_id, job in open_jobs.items():
            state = states[job.job_id]
            if state.live:
                self.ended.pop(run_id, None)
            elif now - self.ended.setdefault(run_id, now) >= END_GRACE_S:
                self.sweep.refresh([run_id])
                if not self.sweep.finished(run_id):
                    self.sweep.mark_failed(run_id, self.reason(run_id, job, state))

    def unschedulable(self, blocked: dict[str, SubmittedJob], reason: str) -> None:
        """Jobs that wait for nodes that are down or drained (a node died): cancelled, their
        runs marked failed, said in one line; the sweep goes on with the others."""
        ids = sorted(j.job_id for j in blocked.values())
        progress.current().note(
            f"{len(ids)} runs cannot be scheduled: their jobs ({', '.join(ids)}) need nodes "
            f"that are down or drained ({reason}); cancelled (rerun the sweep once the nodes "
            "are back: complete runs are skipped)"
        )
        self.cancel(blocked, f"unschedulable, its nodes are down or drained ({reason})")

    def note_pending(self, states: dict[str, slurm.JobState]) -> None:
        """While jobs wait: why, and where in the queue (a line whenever that changes)."""
        places: dict[str, slurm.QueuePlace] = {}
        if any(s.state == "PENDING" for s in states.values()):
            with contextlib.suppress(slurm.SlurmUnreachable):  # the reasons alone then
                places = slurm.queue_places(states)
        line = slurm.pending_note(states, places)
        if line is not None and line != self.last_pending:
            progress.current().note(line)
        self.last_pending = line

    def states(self, open_jobs: dict[str, SubmittedJob]) -> dict[str, slurm.JobState] | None:
        """SLURM's view of the jobs; None while SLURM does not answer (for a while)."""
        try:
            states = slurm.states(j.job_id for j in open_jobs.values())
        except slurm.SlurmUnreachable as exc:
            now = time.monotonic()
            if self.unreachable_since is None:
                self.unreachable_since = now
                print(f"dpsuite: warning: {exc}; trying again", file=sys.stderr, flush=True)
            elif now - self.unreachable_since > UNREACHABLE_LIMIT_S:
                raise CommandAborted(
                    UserError(f"no answer from SLURM for {UNREACHABLE_LIMIT_S:.0f} s: {exc}")
                ) from None
            return None
        self.unreachable_since = None
        return states

    def reason(self, run_id: str, job: SubmittedJob, state: slurm.JobState) -> str:
        """Why a run whose job has ended has no final status: the job's fate and its log."""
        fate = {
            "CANCELLED": "was cancelled",
            "TIMEOUT": "reached its time limit (hydra.launcher.timeout_min)",
            # A pending array element that is cancelled leaves no trace, accounting or not.
            "UNKNOWN": "is no longer known to SLURM (neither squeue nor sacct: cancelled?)",
        }.get(state.state, f"ended {state.state}")
        if state.state == "NODE_FAIL":  # which node: the one SLURM now has down
            fate += f" (node {slurm.down_nodes(state.node) or 'of ' + state.node} lost)"
        if self.sweep.status(run_id) == "pending":
            fate += " before the run started"
        exit_code = f" ({state.reason})" if state.reason.startswith("exit") else ""
        last = last_error_line(job.log_err)
        detail = f": {last}" if last else ""
        return f"SLURM job {job.job_id} {fate}{exit_code}{detail}; log {job.log_err}"

    def cancel(self, open_jobs: dict[str, SubmittedJob], why: str = "", mark: bool = True) -> None:
        """scancel the jobs, wait (bounded) until they are gone, mark their runs failed."""
        ids = [j.job_id for j in open_jobs.values()]
        if not ids:
            return
        arrays = " ".join(slurm.array_ids(ids))
        progress.current().note(f"cancelling {len(ids)} SLURM jobs (scancel {arrays}) ...")
        live = ids
        try:
            slurm.cancel(ids)
            live = wait_until_gone(ids)
        except (KeyboardInterrupt, slurm.SlurmUnreachable):  # a second Ctrl-C: stop waiting
            pass
        self.report_live(live)
        if not mark:
            return
        with contextlib.suppress(ResultsWriteError):  # what stops the sweep is what to report
            self.sweep.refresh(list(open_jobs))
            for run_id, job in open_jobs.items():
                if job.job_id not in live and not self.sweep.finished(run_id):
                    self.sweep.mark_failed(run_id, f"SLURM job {job.job_id} cancelled: {why}")

    @staticmethod
    def report_live(live: list[str]) -> None:
        if live:
            progress.current().note(
                f"SLURM jobs {', '.join(sorted(live))} are still ending; a new sweep of this "
                "results_dir is refused until they are gone"
            )


def wait_until_gone(job_ids: list[str], limit_s: float = CANCEL_WAIT_S) -> list[str]:
    """Wait (at most ``limit_s``) until none of the jobs is live; returns those still live."""
    deadline = time.monotonic() + limit_s
    live = [j for j, s in slurm.states(job_ids).items() if s.live]
    while live and time.monotonic() < deadline:
        time.sleep(1.0)
        live = [j for j, s in slurm.states(live).items() if s.live]
    return live


def last_error_line(log: Path, tail_bytes: int = 65536) -> str:
    """The last line of a job's stderr log that reports an error, or ''."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - tail_bytes))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    hits = [
        line.strip()
        for line in text.splitlines()
        if any(word in line for word in ("error", "Error", "Killed", "CANCELLED", "killed"))
    ]
    return hits[-1][:300] if hits else ""
