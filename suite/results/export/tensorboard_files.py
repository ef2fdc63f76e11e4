"""`dpsuite export tensorboard`: one TensorBoard run per dpsuite run, one directory per sweep.

``OUT/<group>/<run_id>/`` holds one event file: the config as hparams (dotted keys, with the
machine's tag and id so that runs can be told apart by machine) and the run's summary metrics
as the hparams metrics (``final/<metric>``); every column of epochs.csv as a scalar against the
training step (``epochs/<column>``), and of steps.csv (``steps/<column>``), at the wall time it
was recorded; the hardware fingerprint as a text table (``fingerprint``). Exporting again
replaces the event file an earlier export wrote (and only that one).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pandas as pd

from dpsuite.results import owned
from dpsuite.results.export.tree import ExportRun, flatten, require, require_runs

HPARAM_TYPES = (bool, int, float, str)
EVENT_PREFIX = "events.out.tfevents."


def hparams_of(run: ExportRun) -> dict[str, Any]:
    """The composed config as scalar hparams (None as 'null'), with the machine's identity."""
    hparams = flatten(run.config)
    hparams["hardware.tag"] = run.hardware.get("tag")
    hparams["hardware.machine_id"] = run.hardware.get("machine_id")
    hparams["status"] = run.status
    return {k: v if isinstance(v, HPARAM_TYPES) else str(v) for k, v in hparams.items()}


def fingerprint_text(hardware: dict[str, Any]) -> str:
    """The fingerprint as a Markdown table (TensorBoard's text dashboard renders it)."""
    rows = [f"| {key} | {value} |" for key, value in flatten(hardware).items()]
    return "\n".join(["| key | value |", "|---|---|", *rows])


def write_rows(writer, prefix: str, frame: pd.DataFrame, started: float | None) -> None:
    """Every numeric column of a results CSV as a scalar per step; NaN cells are skipped."""
    for _, row in frame.iterrows():
        step = int(row["step"])
        wall = started + float(row["wall_s"]) if started and pd.notna(row.get("wall_s")) else None
        for column, value in row.items():
            if column in ("step", "wall_s") or pd.isna(value):
                continue
            writer.add_scalar(f"{prefix}/{column}", float(value), step, walltime=wall)


def write_run(run: ExportRun, run_out: Path) -> None:
    """The run's event file, written aside and copied into ``run_out`` once complete (a full
    disk leaves no partial file there); the event file an earlier export wrote there (its
    manifest says which) is then removed."""
    owned.begin(run_out)
    staging = None
    try:
        staging = Path(tempfile.mkdtemp(prefix="dpsuite-events-"))
        _write_events(run, staging)
        for event in sorted(staging.iterdir()):
            owned.write(run_out / event.name, event.read_bytes())
    except OSError as exc:
        raise owned.OutputWriteError(staging or run_out, exc) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    owned.finish(run_out)


def _write_events(run: ExportRun, log_dir: Path) -> None:
    """TensorBoard writes from a thread of its own: its I/O error is raised here, in one
    piece, instead of a thread's traceback."""
    failures: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: failures.append(args.exc_value)
    try:
        _summaries(run, log_dir)
    finally:
        threading.excepthook = previous
    if failures:
        raise failures[0] if isinstance(failures[0], OSError) else OSError(str(failures[0]))


def _summaries(run: ExportRun, log_dir: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    with SummaryWriter(log_dir=str(log_dir)) as writer:
        write_rows(writer, "epochs", run.epochs, run.started)
        write_rows(writer, "steps", run.steps, run.started)
        metrics = {f"final/{k}": v for k, v in run.scalar_metrics().items()}
        last_step = int(run.epochs["step"].max()) if not run.epochs.empty else 0
        for tag, value in metrics.items():
            writer.add_scalar(tag, value, last_step)
        for summary in hparams(hparams_of(run), metrics):
            writer.file_writer.add_summary(summary)
        writer.add_text("fingerprint", fingerprint_text(run.hardware), last_step)


def export_tensorboard(runs: list[ExportRun], root: Path, out: Path) -> list[Path]:
    """Write every run's event file under ``out``; returns the run directories written."""
    require("tensorboard", "tensorboard", "tensorboard")
    require_runs(runs, root)
    written = []
    for run in runs:
        run_out = out / run.group / run.run_id
        write_run(run, run_out)
        written.append(run_out)
    return written
