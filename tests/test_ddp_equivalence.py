"""N real DDP workers x batch b must train exactly like 1 worker x batch N*b (float64)."""

import numpy as np
import pytest

from tests.conftest import SMALL, max_diff, trained_params

pytestmark = pytest.mark.multiproc

COMMON = [
    *SMALL,
    "precision=fp64",
    "train.max_steps=60",
    "train.save_params=true",
    "train.evals_per_epoch=1",
    "seed=3",
]


def train_params(dpsuite, tmp_path, name: str, *overrides: str) -> dict[str, np.ndarray]:
    return trained_params(dpsuite, tmp_path / name, *COMMON, *overrides)


@pytest.mark.parametrize(
    "workload,rule,per_worker",
    [("mnist1d_mlp", "linear_warmup", 16), ("mnist1d_cnn", "sqrt", 24), ("mnist1d_mlp", "lars", 8)],
)
def test_two_workers_equal_one_worker_with_twice_the_batch(
    dpsuite, tmp_path, workload, rule, per_worker
):
    pick = [f"workload={workload}", f"lr_rule={rule}"]
    ddp = train_params(
        dpsuite, tmp_path, "ddp", *pick, "workers=2", f"batch.per_worker={per_worker}"
    )
    one = train_params(
        dpsuite, tmp_path, "one", *pick, "workers=1", f"batch.per_worker={2 * per_worker}"
    )
    start = train_params(
        dpsuite,
        tmp_path,
        "start",
        *pick,
        "workers=1",
        "train.max_steps=1",
        f"batch.per_worker={2 * per_worker}",
    )
    assert max_diff(ddp, start) > 1e-3, "training must have moved the parameters"
    assert max_diff(ddp, one) <= 1e-10
