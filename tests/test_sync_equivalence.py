"""Synchronization strategies against plain all-reduce, in real multi-process runs (float64).

Bytes are checked against a hand count for the MNIST-1D MLP: Linear(40, 256), Linear(256, 256),
Linear(256, 10), i.e. weight matrices 256x40, 256x256, 10x256 (PyTorch stores out x in) and
biases of 256, 256 and 10: 10,240 + 65,536 + 2,560 + 522 = 78,858 parameters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dpsuite.cli.main import main as dpsuite
from dpsuite.sync import CONFIGS
from dpsuite.sync.config import FP16_UNIT_ROUNDOFF
from tests.conftest import SMALL, max_diff, only_run, read_params, read_run

pytestmark = pytest.mark.multiproc

PARAMS = 78_858
FP64 = 8
COMMON = [
    *SMALL,
    "precision=fp64",
    "train.save_params=true",
    "train.evals_per_epoch=1",
    "batch.per_worker=16",
    "seed=3",
]
STEPS = 24


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each configuration is trained once for the whole module; returns its run directory."""
    root = tmp_path_factory.mktemp("sync")
    done: dict[str, Path] = {}

    def run(name: str, *overrides: str) -> Path:
        if name not in done:
            out = root / name
            assert dpsuite(["run", *COMMON, f"results_dir={out}", *overrides]) == 0
            done[name] = only_run(out)
            assert read_run(done[name])["status"] == "complete"
        return done[name]

    return run


def metrics(run_dir: Path) -> dict:
    return read_run(run_dir)["metrics"]


def initial_params() -> dict[str, np.ndarray]:
    """The model every run starts from (seed 3, float64), built as the training loop builds it."""
    from dpsuite.workloads import get_workload

    torch.manual_seed(3)
    model = get_workload("mnist1d_mlp", num_samples=2000).build_model().to(torch.float64)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_strategy_synchronizing_every_step_trains_as_allreduce(runs, name):
    """The registry's contract, on two real workers in float64: each strategy set to
    synchronize every step as all-reduce does (its config's `allreduce_overrides`) ends within
    its `allreduce_tolerance` of all-reduce, relative to the distance the parameters travelled."""
    if name == "bf16" and not torch.cuda.is_available():
        pytest.skip("PyTorch's bf16 all-reduce hook needs CUDA and NCCL")
    overrides, tolerance = CONFIGS[name].allreduce_overrides, CONFIGS[name].allreduce_tolerance
    ar = read_params(runs("ar2", "workers=2", f"train.max_steps={STEPS}"))
    label = {"allreduce": "ar2", "local_sgd": "local1"}.get(name, name)  # the runs other tests make
    sync = [] if name == "allreduce" else [f"sync={name}"]
    run = runs(label, "workers=2", f"train.max_steps={STEPS}", *sync, *overrides)
    params, start = read_params(run), initial_params()
    for key in ar:
        moved = float(np.max(np.abs(ar[key] - start[key])))
        diff = float(np.max(np.abs(params[key] - ar[key])))
        assert diff <= max(tolerance * moved, 1e-10), (name, key, diff / moved)


def test_allreduce_bytes_are_the_whole_gradient(runs):
    m = metrics(runs("ar2", "workers=2", f"train.max_steps={STEPS}"))
    # A ring all-reduce sends 2(n-1)/n of the buffer per rank: all of it at n = 2.
    assert m["wire_bytes_per_step"] == PARAMS * FP64 == 630_864
    assert m["collectives_per_step"] == 1  # 631 KB fits DDP's first bucket
    assert m["wire_bytes_histogram"] == [[630_864, STEPS]]
    assert m["server_wire_bytes_per_step"] is None
    assert m["comm_time_s"] > 0


def test_parameter_server_equals_allreduce_and_the_server_carries_n_minus_1(runs):
    ar = runs("ar3", "workers=3", f"train.max_steps={STEPS}")
    ps = runs("ps3", "workers=3", f"train.max_steps={STEPS}", "sync=param_server")
    assert max_diff(read_params(ar), read_params(ps)) <= 1e-10
    assert max_diff(read_params(ps), initial_params()) > 1e-3, "training moved the parameters"
    m = metrics(ps)
    grad = PARAMS * FP64
    assert m["wire_bytes_per_step"] == grad  # a worker sends its gradients
    assert m["server_wire_bytes_per_step"] == (3 - 1) * grad  # the server: the mean, to each
    assert m["collectives_per_step"] == 2
    # The exchange is timed where it happens; the no-sync calibration skips it.
    assert m["comm_time_s"] > 0 and m["exposed_comm_s"] is not None
    assert m["comm_timing"] == "clock"  # no DDP: the exchange is timed by the clock around it
    assert read_run(ps)["sync"] == "param_server"


def test_local_sgd_with_period_1_equals_allreduce(runs):
    ar = runs("ar2", "workers=2", f"train.max_steps={STEPS}")
    local = runs(
        "local1", "workers=2", f"train.max_steps={STEPS}", "sync=local_sgd", "sync.period=1"
    )
    assert max_diff(read_params(ar), read_params(local)) <= 1e-10
    m = metrics(local)
    assert m["wire_bytes_per_step"] == PARAMS * FP64  # the parameters' all-reduce, every step
    assert read_run(local)["sync_label"] == "local_sgd (period 1)"


def test_fp16_compression_stays_within_fp16_rounding_of_allreduce(runs):
    ar = read_params(runs("ar2", "workers=2", f"train.max_steps={STEPS}"))
    fp16_run = runs("fp16", "workers=2", f"train.max_steps={STEPS}", "sync=fp16")
    fp16 = read_params(fp16_run)
    start = initial_params()
    for name in ar:
        moved = float(np.max(np.abs(ar[name] - start[name])))
        diff = float(np.max(np.abs(fp16[name] - ar[name])))
        # Each step's averaged gradient is rounded twice to fp16 (the cast, the sum): relative
        # error <= 2u per step; over the run that stays a few u of the distance travelled.
        assert 0 < diff <= 4 * FP16_UNIT_ROUNDOFF * moved, (name, diff / moved)
    assert metrics(fp16_run)["wire_bytes_per_step"] == PARAMS * 2  # 16 bits, whatever the model's


def powersgd_elements(rank: int) -> int:
    """Hand count of what powerSGD_hook sends per step for the MLP at ``rank`` (rate 2).

    A matrix n x m is sent as P (n x r) and Q (m x r), r = min(n, m, rank), when
    (n + m) r x 2 < n m; else whole. Biases (n x 1) never qualify.
    """
    return {
        # 256x40: 296, 256x256: 512, 10x256: 266 -> 1,074 per unit of rank; + 522 bias elements
        1: 522 + 1 * 1_074,  # 1,596
        # 10x256 at rank 8: 266 x 8 x 2 = 4,256 >= 2,560, so it is sent whole
        8: 522 + 8 * (296 + 512) + 2_560,  # 9,546
    }[rank]


@pytest.mark.parametrize("rank", [1, 8])
def test_powersgd_sends_the_hand_counted_low_rank_factors(runs, rank):
    run = runs(
        f"powersgd{rank}",
        "workers=2",
        "train.max_steps=6",
        "sync=powersgd",
        f"sync.rank={rank}",
        "sync.start_iter=2",
    )
    m = metrics(run)
    full, low = PARAMS * FP64, powersgd_elements(rank) * FP64
    # Two plain all-reduce steps, then PowerSGD's three all-reduces (uncompressed, P, Q).
    assert m["wire_bytes_histogram"] == sorted([[low, 4], [full, 2]])
    assert m["collectives_per_step"] == (2 * 1 + 4 * 3) / 6
    assert full / low == pytest.approx({1: 49.41, 8: 8.26}[rank], abs=0.01)
    assert np.isfinite(m["final_train_loss"])
    assert read_run(run)["sync_label"] == f"powersgd (rank {rank}, from step 2)"
