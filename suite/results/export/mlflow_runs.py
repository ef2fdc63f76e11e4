"""`dpsuite export mlflow`: one MLflow run per dpsuite run, in a local store or a tracking server.

Each run, in the experiment ``--project`` (default ``dpsuite``) and named by its run id, gets the
composed config as params (dotted keys, with the run's derived sizes); every column of
epochs.csv and steps.csv as a metric history against the training step (``epochs/eval_acc``,
``steps/step_time_s``, at the time it was recorded); the run's metrics at its last step
(``final/final_eval_acc``: MLflow's file store keeps ``steps`` beside ``steps/...`` apart only
with a prefix); the hardware fingerprint, sweep, status, workload and LR rule as tags; and its
run.json (and a report directory, when given) as artifacts. Start and end times and the MLflow
status follow the record. Exporting again replaces the runs an earlier export wrote (found by
their ``dpsuite.key`` tag) instead of adding copies.

A local directory is MLflow's file store (``mlruns``), which MLflow 3 keeps behind
``MLFLOW_ALLOW_FILE_STORE=true``; any other tracking URI (``sqlite:///mlflow.db``,
``http://host:5000``) is used as it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from dpsuite.errors import UserError
from dpsuite.results.export.tree import ExportRun, flatten, require, require_runs
from dpsuite.results.export.wandb_runs import SUMMARY_KEYS

KEY_TAG = "dpsuite.key"  # group/run_id: which dpsuite run an MLflow run is
BATCH = 1000  # MLflow's limit of metrics per log_batch (params and tags: 100)
# MLflow's status of a dpsuite status (a diverged run ran to its end; its tag says diverged)
STATUS = {"complete": "FINISHED", "diverged": "FINISHED", "running": "RUNNING", "failed": "FAILED"}


def tracking_uri(out: str) -> str:
    """A tracking URI as given, or a local directory as a file store URI."""
    if "://" in out or out.startswith("sqlite:"):
        return out
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return Path(out).resolve().as_uri()


def params_of(run: ExportRun) -> dict[str, str]:
    """The composed config as dotted keys, with the run's derived sizes; None as 'null'."""
    derived = {k: run.record.get(k) for k in SUMMARY_KEYS if k not in run.config}
    values = {**flatten(run.config), **derived}
    return {k: "null" if v is None else str(v) for k, v in values.items()}


def tags_of(run: ExportRun) -> dict[str, str]:
    rec = run.record
    tags = {
        KEY_TAG: f"{run.group}/{run.run_id}",
        "dpsuite.run_id": run.run_id,
        "dpsuite.group": run.group,
        "dpsuite.status": run.status,
        "workload": str(rec.get("workload")),
        "lr_rule": str(rec.get("lr_rule")),
        "workers": str(rec.get("workers")),
    }
    tags.update({k: str(v) for k, v in flatten(run.hardware, "hardware.").items()})
    return tags


def metrics_of(run: ExportRun, metric) -> list[Any]:
    """Every epochs.csv and steps.csv cell (NaN left out) and the final metrics, as MLflow
    Metric entities at their training step and recording time (milliseconds)."""
    start_ms = int((run.started or 0) * 1000)
    out = []
    for prefix, frame in (("epochs", run.epochs), ("steps", run.steps)):
        for _, row in frame.iterrows():
            step = int(row["step"])
            wall = row.get("wall_s")
            when = start_ms + int(float(wall) * 1000) if pd.notna(wall) else start_ms
            for column, value in row.items():
                if column not in ("step", "wall_s") and pd.notna(value):
                    out.append(metric(f"{prefix}/{column}", float(value), when, step))
    last_step = int(run.epochs["step"].max()) if not run.epochs.empty else 0
    end_ms = int((run.finished or run.started or 0) * 1000)
    out += [metric(f"final/{k}", v, end_ms, last_step) for k, v in run.scalar_metrics().items()]
    return out


def earlier_exports(client, experiment_id: str) -> dict[str, list[str]]:
    """MLflow run ids by dpsuite key, of the runs earlier exports wrote."""
    found: dict[str, list[str]] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        for mlrun in page:
            key = mlrun.data.tags.get(KEY_TAG)
            if key is not None:
                found.setdefault(key, []).append(mlrun.info.run_id)
        token = page.token
        if not token:
            return found


def write_run(client, entities, experiment_id: str, run: ExportRun, report: Path | None) -> str:
    start_ms = int(run.started * 1000) if run.started else None
    mlrun = client.create_run(experiment_id, start_time=start_ms, run_name=run.run_id)
    run_id = mlrun.info.run_id
    params = [entities.Param(k, v) for k, v in params_of(run).items()]
    tags = [entities.RunTag(k, v) for k, v in tags_of(run).items()]
    metrics = metrics_of(run, entities.Metric)
    for i in range(0, max(len(params), len(tags)), 100):
        client.log_batch(run_id, params=params[i : i + 100], tags=tags[i : i + 100])
    for i in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + BATCH])
    if run.run_dir is not None:
        client.log_artifact(run_id, str(run.run_dir / "run.json"))
    if report is not None:
        client.log_artifacts(run_id, str(report), "report")
    end_ms = int(run.finished * 1000) if run.finished else None
    client.set_terminated(run_id, STATUS.get(run.status, "FAILED"), end_time=end_ms)
    return run_id


def export_mlflow(
    runs: list[ExportRun], root: Path, out: str, experiment: str, report: Path | None = None
) -> list[str]:
    """Write every run into the tracking store at ``out``; returns the MLflow run ids. What
    MLflow refuses (a store it cannot write, a server that says no) is one line."""
    require("mlflow", "mlflow", "mlflow")
    require_runs(runs, root)
    from mlflow.exceptions import MlflowException

    try:
        return _export(runs, out, experiment, report)
    except (MlflowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot export to MLflow at {out}: {first}") from None


def _export(runs: list[ExportRun], out: str, experiment: str, report: Path | None) -> list[str]:
    from mlflow import MlflowClient, entities

    client = MlflowClient(tracking_uri=tracking_uri(out))
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    earlier = earlier_exports(client, experiment_id)
    written = []
    for run in runs:
        for old in earlier.get(f"{run.group}/{run.run_id}", []):
            client.delete_run(old)
        written.append(write_run(client, entities, experiment_id, run, report))
    return written
