"""Workloads whose data are torch Datasets: the engine's DataLoader (DistributedSampler), any
batch structure, a workload's own loss and lower-is-better target, the wait for data measured,
and each way a team's data can fail ending the run in one line."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from tests.conftest import SMALL, max_diff, only_run, read_run, run_subprocess, trained_params

pytestmark = pytest.mark.multiproc

PLUGIN = "workload=tests.dataset_workloads:MLPOnDatasets"
NPY = "workload=tests.dataset_workloads:NpyRegression"
FAULTY = "workload=tests.dataset_workloads:Faulty"
EXACT = [*SMALL, "precision=fp64", "train.max_steps=40", "train.save_params=true", "seed=3"]


def params(dpsuite, out, *overrides: str) -> dict[str, np.ndarray]:
    return trained_params(dpsuite, out, *EXACT, *overrides)


def test_datasets_train_exactly_like_the_same_tensors_in_memory(dpsuite, tmp_path):
    """One process, 2 DDP workers (loader workers forked) and 2 simulated workers over
    Datasets all train like mnist1d_mlp's in-memory tensors at the same global batch."""
    memory = params(dpsuite, tmp_path / "mem", "workers=1", "batch.per_worker=32")
    ddp = params(
        dpsuite, tmp_path / "ddp", PLUGIN, "workers=2", "batch.per_worker=16",
        "data.loader_workers=1",
    )  # fmt: skip
    sim = params(
        dpsuite, tmp_path / "sim", PLUGIN, "mode=simulated", "workers=2", "batch.per_worker=16"
    )
    one = params(dpsuite, tmp_path / "one", PLUGIN, "workers=1", "batch.per_worker=32")
    assert max_diff(memory, one) == 0.0  # the same batches, the same order, the same sums
    assert max_diff(memory, ddp) <= 1e-10
    assert max_diff(memory, sim) <= 1e-10


def steps_csv(run) -> list[dict[str, str]]:
    with open(run / "steps.csv") as f:
        return list(csv.DictReader(f))


def test_a_file_backed_job_with_dict_batches_and_a_loss_target(dpsuite, tmp_path):
    out = tmp_path / "out"
    args = [
        NPY,
        f"workload.data_dir={tmp_path / 'samples'}",
        "workload.target_loss=1.0",
        "workers=2",
        "data.loader_workers=2",
        "train.evals_per_epoch=2",
        f"results_dir={out}",
    ]
    assert dpsuite("run", *args) == 0
    run = only_run(out)
    rec = read_run(run)
    m = rec["metrics"]
    assert rec["status"] == "complete" and rec["data_form"] == "datasets"
    assert rec["target_metric"] == "eval_loss" and rec["target_loss"] == 1.0
    assert rec["target_acc"] is None and m["final_eval_acc"] is None
    assert m["steps_to_target"] is not None  # lower is better: reached once the loss fell to 1
    assert m["final_eval_loss"] < 1.0
    assert 0.0 <= m["data_wait_share"] <= 1.0 and m["data_wait_s"] > 0
    assert m["first_batch_s"] > 0
    rows = steps_csv(run)
    assert rows and all(float(r["data_wait_s"]) >= 0 for r in rows)
    parts = m["data_wait_s"] + m["compute_time_s"] + m["exposed_comm_s"]
    assert parts <= m["step_time_s"] * 1.0001 or math.isclose(parts, m["step_time_s"])


def test_eval_loader_workers_are_forked_once_before_training(tmp_path):
    """Every evaluation is served by the same persistent loader workers, forked as the run
    sets up: before any backward pass, whose all-reduces end on gloo's thread (a fork at
    that moment can leave a worker deadlocked in its first instant on some CPython
    releases, and the run's output held open by it)."""
    samples = tmp_path / "samples"
    proc = run_subprocess(
        "run",
        "workload=tests.dataset_workloads:WhoLoads",
        f"workload.data_dir={samples}",
        "workers=2",
        "data.loader_workers=2",
        "train.epochs=2",
        "train.evals_per_epoch=2",
        f"results_dir={tmp_path / 'out'}",
    )
    assert proc.returncode == 0, proc.stderr
    evals = (only_run(tmp_path / "out") / "epochs.csv").read_text().splitlines()[1:]
    assert len(evals) >= 4, evals
    noted = [line.split() for line in (samples / "loaders.txt").read_text().splitlines()]
    started = {split: {int(pid): int(t) for s, pid, t in noted if s == split} for split in
               ("train", "eval")}  # fmt: skip
    assert len(started["eval"]) <= 2 * 2, noted  # 2 ranks x 2 workers, for every evaluation
    assert max(started["eval"].values()) <= min(started["train"].values()), noted


@pytest.mark.parametrize(
    "fault,extra,says",
    [
        ("raises", [], "train sample 7: ValueError: cannot decode this file"),
        ("structure", [], "a batch must hold tensors"),
        ("empty", [], "train split is empty"),
        ("killed", ["data.loader_workers=1"], "exited unexpectedly"),
        ("hangs", ["data.loader_workers=1", "data.timeout_s=2"], "timed out after 2.0 s"),
    ],
)
def test_a_failing_dataset_fails_its_run_in_one_line(tmp_path, fault, extra, says):
    out = tmp_path / "out"
    proc = run_subprocess(
        "run",
        FAULTY,
        f"workload.fault={fault}",
        f"workload.data_dir={tmp_path / 'samples'}",
        "train.max_steps=20",
        f"results_dir={out}",
        *extra,
        timeout=180,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    rec = read_run(only_run(out))
    assert rec["status"] == "failed" and says in rec["error"], rec["error"]
    assert "\n" not in rec["error"]
    lines = [line for line in proc.stderr.splitlines() if says in line]
    assert len(lines) == 1, proc.stderr


def test_a_train_split_smaller_than_the_global_batch_is_refused(tmp_path):
    proc = run_subprocess(
        "run",
        NPY,
        "workload.num_samples=20",
        f"workload.data_dir={tmp_path / 'samples'}",
        "batch.per_worker=32",
        f"results_dir={tmp_path / 'out'}",
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "larger than the training set (16 samples" in proc.stderr


def test_a_loss_target_workload_has_its_steps_to_target_study(dpsuite, tmp_path):
    """A batch x LR grid of the file-backed job: the report's study counts steps until the
    loss fell to its target, and says so in words (not as an accuracy)."""
    out, report = tmp_path / "out", tmp_path / "report"
    args = [
        "-m",
        NPY,
        f"workload.data_dir={tmp_path / 'samples'}",
        "workload.target_loss=0.5",
        "mode=simulated",
        "batch.per_worker=16,32,64",
        "lr_rule.base_lr=0.03",
        "lr_rule=naive,linear",
        "train.stop_at_target=true",
        "train.evals_per_epoch=4",
        "train.epochs=8",
        "noise_scale.enabled=false",
        f"results_dir={out}",
    ]
    assert dpsuite("run", *args) == 0
    assert dpsuite("report", str(out), "--out", str(report)) == 0
    page = (report / "index.md").read_text()
    assert "Steps to test loss ≤ 0.5 vs global batch" in page
    assert "optimizer steps until the test loss fell to 0.5" in page
    assert "loss ≤ 0.5 test accuracy" not in page


@pytest.mark.parametrize("fault,status", [("", "complete"), ("nan_target", "failed")])
def test_in_memory_regression_targets_are_not_class_labels(dpsuite, tmp_path, fault, status):
    """A workload scored by its loss may hand over float targets as tensors (they were once
    refused as labels out of range); a NaN among them is still a data bug."""
    out = tmp_path / "out"
    args = [
        "workload=tests.dataset_workloads:TensorRegression",
        f"workload.data_dir={tmp_path / 'samples'}",
        f"workload.fault={fault}",
        "train.max_steps=5",
        f"results_dir={out}",
    ]
    dpsuite("run", *args)
    rec = read_run(only_run(out))
    assert rec["status"] == status, rec.get("error")
    if fault:
        assert "train targets hold NaN or infinite values" in rec["error"]
    else:
        assert rec["data_form"] == "tensors" and rec["metrics"]["final_eval_acc"] is None


def test_an_iterable_train_split_is_dealt_over_ranks_and_loader_workers(dpsuite, tmp_path):
    out = tmp_path / "out"
    args = [
        "workload=tests.dataset_workloads:NpyStream",
        f"workload.data_dir={tmp_path / 'samples'}",
        "workers=2",
        "data.loader_workers=2",
        "train.epochs=2",
        f"results_dir={out}",
    ]
    assert dpsuite("run", *args) == 0
    rec = read_run(only_run(out))
    # 320 train samples, global batch 64: 5 steps an epoch on every rank.
    assert rec["status"] == "complete" and rec["metrics"]["steps"] == 10
    assert rec["train_samples"] == 320 and rec["data_form"] == "datasets"
