"""A validation split held out of MNIST-1D's training data: the evaluations during training (and
steps to target) are on it, the test split is evaluated once at the end."""

from __future__ import annotations

import json

import pandas as pd
import torch

from dpsuite import workloads
from tests.conftest import only_run


def test_validation_is_the_end_of_the_training_split_and_never_trained_on(tmp_path):
    plain = workloads.get_workload("mnist1d_mlp", tmp_path, num_samples=2000).load_data()
    held = workloads.get_workload("mnist1d_mlp", tmp_path, num_samples=2000, validation_samples=300)
    data = held.load_data()
    assert (held.num_train(), data.num_train, data.num_eval) == (1300, 1300, 300)
    assert data.eval_split == "validation" and plain.eval_split == "test"
    assert torch.equal(data.train_x, plain.train_x[:1300])
    assert torch.equal(data.eval_x, plain.train_x[1300:])  # the rest of the training split
    assert torch.equal(data.test_x, plain.eval_x) and torch.equal(data.test_y, plain.eval_y)
    assert data.problem(10) is None


def test_validation_larger_than_the_training_split_is_refused(dpsuite, tmp_path, capsys):
    code = dpsuite(
        "run",
        "workload.num_samples=2000",
        "workload.validation_samples=1600",
        f"results_dir={tmp_path / 'r'}",
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("dpsuite: error:") and "validation_samples" in err
    assert len(err.splitlines()) == 1


def test_a_run_counts_steps_to_target_on_validation_and_reports_test_accuracy(dpsuite, tmp_path):
    out = tmp_path / "r"
    code = dpsuite(
        "run",
        "workload=mnist1d_mlp",
        "workload.num_samples=2000",
        "workload.validation_samples=200",
        "workload.target_acc=0.3",
        "train.epochs=3",
        "train.evals_per_epoch=4",
        "train.stop_at_target=true",
        "train.target_evals=3",
        f"results_dir={out}",
    )
    assert code == 0
    run = only_run(out)
    record = json.loads((run / "run.json").read_text())
    metrics = record["metrics"]
    assert (record["train_samples"], record["eval_samples"]) == (1400, 200)
    assert metrics["eval_split"] == "validation"
    assert 0 <= metrics["final_test_acc"] <= 1 and metrics["final_test_loss"] > 0
    evals = pd.read_csv(run / "epochs.csv")
    # the median of 3 consecutive validation evaluations, counted at the middle one; the run
    # stopped at the third
    medians = evals["eval_acc"].rolling(3).median()
    first = int(medians[medians >= 0.3].index[0])
    assert metrics["steps_to_target"] == evals["step"].iloc[first - 1]
    assert len(evals) == first + 1
