"""`dpsuite run` end to end: real worker processes, results contract, rerun skipping."""

import math

import pandas as pd
import pytest

from dpsuite import results
from tests.conftest import SMALL, only_run, read_run, run_subprocess

pytestmark = pytest.mark.multiproc

# The results schema is the contract: a run writes every key of it, and no key that it lacks.
# target_metric and target_loss: only the runs of a workload scored by its loss have them.
CONTRACT_KEYS = set(results.schema.names(results.schema.RUN)) - {"target_metric", "target_loss"}
METRIC_KEYS = set(results.schema.names(results.schema.METRICS)) - {"tokens_per_s"}  # tokens only
GNS_KEYS = set(results.schema.names(results.schema.GRAD_NOISE_SCALE))
HARDWARE_KEYS = {
    "tag",
    "hostname",
    "cpu",
    "cpu_count",
    "accelerator",
    "accelerator_count",
    "accelerator_memory_gib",
    "backend",
    "torch",
    "cuda",
    "nccl",
    "python",
    "threads_per_worker",
    "workers_per_host",
    "oversubscribed",
}


def test_two_worker_run_writes_the_contract_and_is_skipped_on_rerun(dpsuite, tmp_path, capsys):
    args = [
        "run",
        *SMALL,
        "workers=2",
        "train.epochs=2",
        "hardware.tag=ci",
        f"results_dir={tmp_path}",
    ]
    proc = run_subprocess(*args)
    assert proc.returncode == 0, proc.stderr
    run = only_run(tmp_path)
    rec = read_run(run)
    assert rec.keys() == CONTRACT_KEYS
    assert rec["hardware"].keys() >= HARDWARE_KEYS
    assert rec["metrics"].keys() == METRIC_KEYS
    assert rec["metrics"]["grad_noise_scale"].keys() == GNS_KEYS
    assert list(pd.read_csv(run / "steps.csv").columns) == results.schema.names(
        results.schema.STEPS
    )
    assert rec["status"] == "complete" and rec["error"] is None
    assert (
        rec["workers"] == 2 and rec["global_batch"] == 64 and rec["peak_lr"] == pytest.approx(0.2)
    )
    assert rec["hardware"]["backend"] == "gloo" and rec["hardware"]["tag"] == "ci"
    assert rec["threads_per_worker"] >= 1
    assert rec["config"]["workers"] == 2 and "hydra" not in rec["config"]
    assert rec["hardware"]["workers_per_host"] == 2 and rec["bucket_cap_mb"] == 25
    assert rec["hardware"]["oversubscribed"] is (
        2 * rec["threads_per_worker"] > rec["hardware"]["cpus_usable"]
    )
    m = rec["metrics"]
    assert m["samples_per_s"] > 0 and m["step_time_s"] > 0
    assert m["step_time_p90_s"] >= m["step_time_s"]
    # communication: DDP's reducer timers on every 10th step, and the no_sync calibration
    assert m["comm_timing"] == "ddp_reducer" and m["comm_samples_rejected"] == 0
    assert m["comm_sampled_steps"] == 4  # steps 9, 19, 29, 39 of 50 (read at 19, 29, 39, 49)
    assert 0 < m["comm_wait_s"] <= m["comm_time_s"] and m["collectives_per_step"] >= 1
    assert m["calibration_steps"] == 10 and m["compute_time_s"] > 0
    beyond = m["step_time_s"] - m["data_wait_s"] - m["compute_time_s"]
    assert m["exposed_comm_s"] == pytest.approx(max(0.0, beyond))
    assert m["comm_fraction"] == pytest.approx(m["exposed_comm_s"] / m["step_time_s"])
    # the slowest rank's compute = the typical rank's + the wait for the slowest
    assert 0 < m["rank_compute_time_s"] <= m["compute_time_s"] and m["straggler_wait_s"] >= 0
    assert m["rank_compute_time_s"] + m["straggler_wait_s"] == pytest.approx(m["compute_time_s"])
    assert sum(rec["param_numels"]) == rec["num_params"]  # DDP's buckets, for the model
    assert m["steps"] == 2 * (1600 // 64)
    assert 0.1 < m["final_eval_acc"] <= 1
    gns = m["grad_noise_scale"]  # the ranks' local gradients, measured on every 50th step
    assert gns["method"] == "ranks" and gns["estimates"] == 1 and gns["b_small"] == 32

    epochs = pd.read_csv(run / "epochs.csv")
    assert list(epochs.columns) == results.EPOCH_COLUMNS
    assert list(epochs["epoch"]) == [0, 1, 2]
    assert math.isnan(epochs["train_loss"][0]) and epochs["train_loss"][1:].notna().all()
    steps = pd.read_csv(run / "steps.csv")
    assert list(steps.columns) == results.STEP_COLUMNS and (steps["step_time_s"] > 0).all()
    assert len(steps) == m["timed_steps"] == m["steps"] - 5  # warm-up steps excluded
    sampled = steps.dropna(subset=["comm_s"])
    assert list(sampled["step"]) == [9, 19, 29, 39]
    assert (sampled["comm_s"] > 0).all() and (sampled["comm_s"] <= sampled["step_time_s"]).all()
    assert (sampled["comm_wait_s"] >= 0).all()
    assert (sampled["comm_wait_s"] <= sampled["comm_s"]).all()

    # The reruns in this process (the console script's code path; a fresh one is above).
    capsys.readouterr()
    assert dpsuite(*args) == 0
    again = capsys.readouterr().out
    assert "already complete" in again and "skipped" in again
    assert read_run(run)["started_at"] == rec["started_at"]

    assert dpsuite(*args, "force=true") == 0
    forced = capsys.readouterr().out
    assert "already complete" not in forced
    assert "replaced the previous complete result" in forced
    assert read_run(run)["started_at"] != rec["started_at"]
    assert not list((tmp_path / ".attempts").iterdir())


@pytest.mark.multiproc
def test_the_comm_hook_times_every_step(dpsuite, tmp_path):
    args = [*SMALL, "workers=2", "threads_per_worker=1", "train.epochs=1", "timing.comm_hook=true"]
    assert dpsuite("run", *args, f"results_dir={tmp_path}") == 0
    run = only_run(tmp_path)
    m = read_run(run)["metrics"]
    assert m["comm_timing"] == "hook" and m["comm_sampled_steps"] == m["timed_steps"]
    assert 0 < m["comm_wait_s"] <= m["comm_time_s"]
    assert m["step_time_s"] > 0 and m["exposed_comm_s"] is not None and m["calibration_steps"]
    steps = results.load_steps(run)
    assert (steps["comm_s"] > 0).all() and (steps["comm_s"] <= steps["step_time_s"]).all()


def test_lr_per_epoch_is_recorded(dpsuite, tmp_path):
    assert (
        dpsuite(
            "run",
            *SMALL,
            "lr_rule=linear_warmup",
            "batch.per_worker=128",
            "train.epochs=3",
            "lr_rule.warmup_epochs=1",
            "schedule.name=constant",
            f"results_dir={tmp_path}",
        )
        == 0
    )
    epochs = pd.read_csv(only_run(tmp_path) / "epochs.csv")
    # base 0.1 at batch 32 -> peak 0.4 at 128, reached after one epoch of warmup
    assert epochs["lr"].iloc[0] == pytest.approx(0.1)
    assert epochs["lr"].iloc[-1] == pytest.approx(0.4)


def test_divergence_is_a_result(dpsuite, tmp_path):
    code = dpsuite(
        "run",
        *SMALL,
        "lr_rule=linear",
        "batch.per_worker=512",
        "workload.base_lr=50",
        "train.epochs=3",
        f"results_dir={tmp_path}",
    )
    assert code == 0
    rec = read_run(only_run(tmp_path))
    assert rec["status"] == "diverged" and "non-finite" in rec["error"]
    assert (only_run(tmp_path) / "epochs.csv").exists()


def test_one_worker_communicates_nothing_and_bf16_runs(dpsuite, tmp_path):
    args = [*SMALL, "precision=bf16", "train.max_steps=12", f"results_dir={tmp_path}"]
    assert dpsuite("run", *args) == 0
    rec = read_run(only_run(tmp_path))
    m = rec["metrics"]
    assert rec["status"] == "complete" and rec["precision"] == "bf16"
    assert math.isfinite(m["final_eval_loss"])
    assert m["comm_time_s"] == 0 and m["exposed_comm_s"] == 0 and m["comm_fraction"] == 0
    # One process: the step is its wait for data (an index batch: microseconds) and compute.
    assert m["compute_time_s"] == pytest.approx(m["step_time_s"] - m["data_wait_s"])
    assert m["data_wait_s"] < 0.05 * m["step_time_s"] and m["calibration_steps"] == 0
    assert m["straggler_wait_s"] == 0 and m["rank_compute_time_s"] == m["compute_time_s"]
    steps = pd.read_csv(only_run(tmp_path) / "steps.csv")
    assert (steps["comm_s"] == 0).all() and (steps["comm_wait_s"] == 0).all()
