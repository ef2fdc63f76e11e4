"""The Hydra application behind `dpsuite run`: one job = one run (a multirun = a sweep)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import hydra
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from suite.conf import schema
from suite.engine.distributed import ranks_from_env
from suite.errors import CommandAborted, ResultsWriteError, UserError

schema.register()  # the config groups' options, before Hydra composes anything

# Statuses of the jobs run by this process, for the CLI's exit code and summary.
OUTCOMES: list[tuple[str, str]] = []
# Called with (run_id, status) after each job of this process (the sweep's manifest).
RUN_LISTENERS: list[Callable[[str, str], None]] = []
# True while `run_hydra` runs Hydra here: jobs run in the command's own process (not in a
# SLURM/submitit job process, where an error can only fail that job).
_in_command = False


def run_job(cfg: DictConfig) -> str:
    """Resolve, validate and launch one run; returns its final status."""
    try:
        return _run_job(cfg)
    except ResultsWriteError as exc:
        if _in_command:  # Hydra's job loop would go on with the next run: end the command
            raise CommandAborted(exc) from None
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        OUTCOMES.append(("?", "failed"))
        return "failed"


def _run_job(cfg: DictConfig) -> str:
    from suite import progress
    from suite.conf.run_spec import resolve
    from suite.engine.launch import launch

    ranks = ranks_from_env()
    try:
        spec = resolve(
            cfg,
            world_size=ranks.world_size if ranks else None,
            local_world_size=ranks.local_world_size if ranks else None,
        )
    except UserError as exc:
        print(f"dpsuite: error: {exc}", file=sys.stderr)
        OUTCOMES.append(("?", "invalid"))
        return "invalid"
    try:
        status = launch(spec)
    except ResultsWriteError:
        raise
    except Exception as exc:  # a joined rank's failure: record it, let the sweep go on
        print(f"{spec.run_id}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = "failed"
    OUTCOMES.append((spec.run_id, status))
    if ranks is None or ranks.rank == 0:
        progress.current().run_finished(spec.run_id, status)
        for listener in RUN_LISTENERS:
            listener(spec.run_id, status)
    return status


class ReleaseJobConfig(Callback):
    """Drops a finished job's copies of its config (configured in conf/config.yaml).

    Hydra keeps every job's JobReturn until the sweep ends, with deep copies of the job's config
    and of Hydra's own: about 130 KB per run, which a long in-process sweep would accumulate
    (0.5 GB over 4096 runs). Nothing reads them afterwards; the sweeper reads return values only.
    """

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        job_return.cfg = None
        job_return.hydra_cfg = None


@hydra.main(config_path="pkg://suite.conf", config_name="config", version_base=None)
def hydra_main(cfg: DictConfig) -> str:
    return run_job(cfg)


def run_hydra(args: list[str]) -> None:
    """Run the Hydra app with ``args`` as its command line (`dpsuite run ARGS`)."""
    global _in_command
    argv, sys.argv = sys.argv, ["dpsuite", *args]
    _in_command = True
    try:
        hydra_main()
    finally:
        sys.argv = argv
        _in_command = False
