"""The Hydra application behind `dpsuite run`: one job = one run (a multirun = a sweep).

A job's outcome is its run's ``run.json``, wherever the job ran (in this process, in spawned
workers, in a SLURM job): the sweep in this process reads those files (``SweepObserver``), and
nothing else carries a status back.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import hydra
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from dpsuite.conf import schema
from dpsuite.errors import CommandAborted, ResultsWriteError, UserError, raise_terminated
from dpsuite.runtime.ranks import ranks_from_env

schema.register()  # the config groups' options (built-in workloads), before Hydra composes

if TYPE_CHECKING:
    from dpsuite.conf.run_spec import RunSpec


@dataclass(frozen=True)
class SubmittedJob:
    """A run's job on a cluster: its id and where its logs go."""

    job_id: str
    log_out: Path
    log_err: Path


class SweepObserver(Protocol):
    """The sweep of this command, as launchers and jobs of this process see it."""

    def refresh(self, run_ids: Iterable[str] | None = None) -> None:
        """Read the run.json of these runs (default: all) again and report what changed."""

    def launch_specs(self, first: int, count: int) -> list[RunSpec | None]:
        """The runs of Hydra's jobs first..first+count-1; None for a job with nothing to run."""

    def jobs_submitted(self, jobs: dict[str, SubmittedJob]) -> None:
        """These runs (by run id) now have jobs on a cluster."""

    def finished(self, run_id: str) -> bool:
        """The run has a final status written in this sweep."""

    def status(self, run_id: str) -> str:
        """The run's status in this sweep, as its run.json says."""

    def mark_failed(self, run_id: str, reason: str) -> None:
        """Write a final `failed` status for a run whose job ended without one."""


# The sweep of this command while `run_hydra` runs it (None: a single run, or a job process).
_observer: SweepObserver | None = None
# True while `run_hydra` runs Hydra here: jobs run in the command's own process (not in a
# SLURM/submitit job process, where an error can only fail that job).
_in_command = False


def observer() -> SweepObserver | None:
    return _observer


def run_job(cfg: DictConfig) -> str:
    """Resolve, validate and launch one run; returns its final status."""
    spec = None
    try:
        spec = _resolve(cfg)
        return _launch(spec) if spec is not None else "invalid"
    except ResultsWriteError as exc:
        if _in_command:  # Hydra's job loop would go on with the next run: end the command
            raise CommandAborted(exc) from None
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        return "failed"
    finally:
        if _observer is not None and spec is not None:  # it ran here: run.json says how
            _observer.refresh([spec.run_id])


def _resolve(cfg: DictConfig) -> RunSpec | None:
    from dpsuite.conf.run_spec import resolve

    ranks = ranks_from_env()
    try:
        return resolve(
            cfg,
            world_size=ranks.world_size if ranks else None,
            local_world_size=ranks.local_world_size if ranks else None,
        )
    except UserError as exc:
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        return None


def _launch(spec: RunSpec) -> str:
    from dpsuite.engine.launch import launch

    with _terminated_by_sigterm():
        try:
            return launch(spec)
        except ResultsWriteError:
            raise
        except Exception as exc:  # a joined rank's failure: its rank 0 records it
            print(f"{spec.run_id}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            ranks = ranks_from_env()
            if ranks is not None and ranks.rank > 0 and not _in_multirun():
                raise SystemExit(1) from None  # this rank owns no run.json: its exit code tells
            return "failed"


@contextmanager
def _terminated_by_sigterm() -> Iterator[None]:
    """In a submitit job, SIGTERM (scancel, time limit) ends the run as failed, at once.

    submitit ignores SIGTERM in its jobs (for requeueing, which dpsuite does not use), so a
    cancelled job would otherwise train on until SLURM kills it, leaving run.json `running`.
    The command's own process gets the same handler from the CLI.
    """
    if (
        "SUBMITIT_EXECUTOR" not in os.environ
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class ReleaseJobConfig(Callback):
    """Drops a finished job's copies of its config (configured in conf/config.yaml).

    Hydra keeps every job's JobReturn until the sweep ends, with deep copies of the job's config
    and of Hydra's own: about 130 KB per run, which a long in-process sweep would accumulate
    (0.5 GB over 4096 runs). Nothing reads them afterwards; the sweeper reads return values only.
    """

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        job_return.cfg = None
        job_return.hydra_cfg = None


@hydra.main(config_path="pkg://dpsuite.conf", config_name="config", version_base=None)
def hydra_main(cfg: DictConfig) -> str:
    return run_job(cfg)


def run_hydra(args: list[str], sweep: SweepObserver | None = None) -> None:
    """Run the Hydra app with ``args`` as its command line (`dpsuite run ARGS`); ``sweep``
    observes the runs of a multirun."""
    global _in_command, _observer
    argv, sys.argv = sys.argv, ["dpsuite", *args]
    _in_command, _observer = True, sweep
    try:
        hydra_main()
    finally:
        sys.argv = argv
        _in_command, _observer = False, None
