"""The Hydra application behind `dpsuite run`: one job = one run (a multirun = a sweep)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from suite.distributed import ranks_from_env
from suite.errors import UserError

# Statuses of the jobs run by this process, for the CLI's exit code and summary.
OUTCOMES: list[tuple[str, str]] = []


def run_job(cfg: DictConfig) -> str:
    """Resolve, validate and launch one run; returns its final status."""
    from suite.launch import launch
    from suite.run_spec import resolve

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
    status = launch(spec)
    OUTCOMES.append((spec.run_id, status))
    return status


@hydra.main(config_path="conf", config_name="config", version_base=None)
def hydra_main(cfg: DictConfig) -> str:
    return run_job(cfg)
