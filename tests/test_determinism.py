"""Same config and seed on CPU -> bit-identical losses, in every mode."""

import pandas as pd
import pytest

from tests.conftest import SMALL, only_run

pytestmark = pytest.mark.multiproc


@pytest.mark.parametrize(
    "mode_args", [["workers=1"], ["workers=2"], ["mode=simulated", "workers=4"]], ids=str
)
def test_same_seed_same_losses(dpsuite, tmp_path, mode_args):
    frames = []
    for attempt in ("a", "b"):
        out = tmp_path / attempt
        assert (
            dpsuite("run", *SMALL, *mode_args, "train.epochs=2", "seed=11", f"results_dir={out}")
            == 0
        )
        frames.append(pd.read_csv(only_run(out) / "epochs.csv").drop(columns="wall_s"))
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)
    assert frames[0]["train_loss"].iloc[1:].notna().all()


def test_simulated_divergence_is_recorded(dpsuite, tmp_path):
    assert (
        dpsuite(
            "run",
            *SMALL,
            "mode=simulated",
            "workers=8",
            "lr_rule=linear",
            "workload.base_lr=50",
            "train.epochs=3",
            f"results_dir={tmp_path}",
        )
        == 0
    )
    import json

    rec = json.loads((only_run(tmp_path) / "run.json").read_text())
    assert rec["status"] == "diverged" and rec["mode"] == "simulated"


@pytest.mark.parametrize("sync", ["allreduce", "local_sgd"])
def test_ranks_agree_on_divergence(dpsuite, tmp_path, sync):
    """All-reduce decides from the parameters every rank shares (no collective), local SGD
    (whose replicas differ between averagings) from the losses across ranks: either way both
    ranks stop at the same check, and the run is recorded as diverged."""
    import json

    args = [*SMALL, "workers=2", f"sync={sync}", "lr_rule=linear", "workload.base_lr=50"]
    args += ["train.epochs=3", "train.check_every=3", f"results_dir={tmp_path}"]
    assert dpsuite("run", *args) == 0
    rec = json.loads((only_run(tmp_path) / "run.json").read_text())
    assert rec["status"] == "diverged", rec["status"]
    step = int(rec["error"].split("by step ")[1].split()[0])
    assert step % 3 == 0 and rec["metrics"]["steps"] == step
    assert rec["step_protocol"] == 2
