"""`dpsuite export wandb`: one W&B run per dpsuite run, in offline mode (no account, no network).

Each run gets the composed config as dotted keys (and the run's derived sizes) as its config,
one history row per training step that has evaluations or step timings (epochs.csv and
steps.csv merged on the step), the run's metrics and its hardware fingerprint in the summary,
and tags for the workload, LR rule, workers, machine, accelerator, backend and status; runs are
grouped by sweep (``group``). They are written under ``OUT/wandb/offline-run-*``; ``wandb
sync`` uploads them. The W&B run id is derived from the group and run id, so an upload of a
second export updates the same runs, and exporting again replaces the offline directories of
the runs it writes.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from dpsuite.results.export.tree import ExportRun, flatten, require, require_runs

TAG_LENGTH = 64  # W&B's limit
# what a run record derives from its config (a config group is its name in the record)
SUMMARY_KEYS = ("mode", "workers", "per_worker_batch", "global_batch")


def wandb_id(run: ExportRun) -> str:
    return hashlib.sha1(f"{run.group}/{run.run_id}".encode()).hexdigest()[:16]


def tags_of(run: ExportRun) -> list[str]:
    hw, rec = run.hardware, run.record
    machine = hw.get("tag") or f"{hw.get('hostname')} ({hw.get('machine_id')})"
    tags = [
        str(rec.get("workload")),
        str(rec.get("lr_rule")),
        f"workers={rec.get('workers')}",
        f"machine={machine}",
        f"backend={hw.get('backend')}",
        run.status,
    ]
    if hw.get("accelerator") not in (None, "none"):
        tags.append(f"accelerator={hw['accelerator']}")
    return [t[:TAG_LENGTH] for t in tags]


def history(run: ExportRun) -> list[tuple[int, dict[str, float]]]:
    """(step, values) in step order: epochs/<column> and steps/<column>, NaN cells left out."""
    rows: dict[int, dict[str, float]] = {}
    for prefix, frame in (("epochs", run.epochs), ("steps", run.steps)):
        for _, row in frame.iterrows():
            values = rows.setdefault(int(row["step"]), {})
            for column, value in row.items():
                if column != "step" and pd.notna(value):
                    values[f"{prefix}/{column}"] = float(value)
    return sorted(rows.items())


def config_of(run: ExportRun) -> dict[str, Any]:
    """The composed config as dotted keys (``workload.num_samples``, ``lr_rule.warmup_epochs``:
    what W&B filters and groups on), with the run's derived sizes and its id."""
    derived = {k: run.record.get(k) for k in SUMMARY_KEYS if k not in run.config}
    return {**flatten(run.config), **derived, "run_id": run.run_id}


def write_run(wandb, run: ExportRun, out: Path, project: str) -> Path:
    run_id = wandb_id(run)
    for old in (out / "wandb").glob(f"offline-run-*-{run_id}"):
        shutil.rmtree(old)
    live = wandb.init(
        project=project,
        group=run.group,
        name=run.run_id,
        id=run_id,
        config=config_of(run),
        tags=tags_of(run),
        dir=str(out),
        mode="offline",
        job_type="dpsuite-run",
        settings=wandb.Settings(
            silent=True,
            console="off",
            # the exporting machine is not the measured one: no system metrics, host or git
            # metadata of its own (the run's fingerprint is in the summary)
            x_disable_stats=True,
            x_disable_meta=True,
            x_disable_machine_info=True,
            disable_git=True,
            disable_code=True,
            x_save_requirements=False,
        ),
    )
    try:
        for step, values in history(run):
            live.log(values, step=step)
        live.summary.update(run.scalar_metrics())
        live.summary.update({"status": run.status, **flatten(run.hardware, "hardware.")})
        return Path(live.dir).parent
    finally:
        live.finish()


def export_wandb(runs: list[ExportRun], root: Path, out: Path, project: str) -> list[Path]:
    """Write every run as an offline W&B run under ``out/wandb``; returns their directories."""
    wandb = require("wandb", "wandb", "wandb")
    require_runs(runs, root)
    out.mkdir(parents=True, exist_ok=True)
    try:
        return [write_run(wandb, run, out, project) for run in runs]
    finally:
        # finish() can return before W&B's service has written a run's file; its teardown
        # waits until everything is on disk
        wandb.teardown()
