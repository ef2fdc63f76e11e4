"""Sharded data parallel (zero1, fsdp) against DDP, in real two-worker runs in float64.

The same batches, LR plan and initial model: sharding the optimizer state (ZeRO-1) or the
parameters, gradients and state (FSDP, either reshard setting) must leave the parameters where
DDP's all-reduce leaves them, for every built-in workload and the example plugin. With two
workers each gradient element is the sum of the same two numbers either way (all-reduce or
reduce-scatter), so the steps agree to float64 rounding: at most ``TOLERANCE`` of the distance
the parameters travelled. Memory per rank: the sharded parts hold about half of DDP's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpsuite import workloads
from tests.conftest import REPO, only_run, read_params, read_run

pytestmark = pytest.mark.multiproc

STEPS = 4
TOLERANCE = 1e-12  # relative to the distance travelled (float64: 2^-52 is 2.2e-16)
EXAMPLE = REPO / "examples" / "dpsuite-example-plugin" / "src"
PLUGIN = "dpsuite_example.spirals:SpiralsMLP"
STRATEGIES = {
    "zero1": ["sync=zero1"],
    "fsdp3": ["sync=fsdp"],
    "fsdp2": ["sync=fsdp", "sync.reshard_after_forward=false"],
}


def small(name: str) -> list[str]:
    config = workloads.CONFIGS[name]
    return [f"workload={name}", *(f"workload.{k}={v}" for k, v in config.small.items())]


WORKLOADS = {name: small(name) for name in workloads.CONFIGS}
WORKLOADS["example_plugin"] = [f"workload={PLUGIN}", "workload.num_samples=400"]


def train(dpsuite, out: Path, workload: list[str], sync: list[str]) -> Path:
    args = [*workload, "workers=2", "batch.per_worker=4", f"train.max_steps={STEPS}"]
    args += ["precision=fp64", "train.save_params=true", "seed=5", "timing.warmup_steps=0"]
    assert dpsuite("run", *args, *sync, f"results_dir={out}") == 0
    run = only_run(out)
    assert read_run(run)["status"] == "complete"
    return run


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_sharded_strategies_train_as_ddp(dpsuite, tmp_path, monkeypatch, name):
    if name == "torchvision":
        pytest.importorskip("torchvision", reason="torchvision models need dpsuite[vision]")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLE))  # for the worker processes
    ddp_run = train(dpsuite, tmp_path / "ddp", WORKLOADS[name], [])
    ddp = read_params(ddp_run)
    with np.load(ddp_run / "params.npz") as f:
        keys = set(f.files)
    ddp_memory = read_run(ddp_run)["metrics"]
    for label, sync in STRATEGIES.items():
        run = train(dpsuite, tmp_path / label, WORKLOADS[name], sync)
        params = read_params(run)
        assert set(params) == keys, label
        worst = 0.0
        for key, value in params.items():
            diff = float(np.max(np.abs(value - ddp[key]))) if value.size else 0.0
            scale = max(float(np.max(np.abs(ddp[key]))) if value.size else 0.0, 1.0)
            worst = max(worst, diff / scale)
        print(f"{name} {label}: largest difference from DDP {worst:.3g} of the values")
        assert worst <= TOLERANCE, (label, worst)
        assert_memory_sharded(label, read_run(run)["metrics"], ddp_memory)


def assert_memory_sharded(label: str, sharded: dict, ddp: dict) -> None:
    """ZeRO-1 stores less optimizer state than DDP (its share: whole tensors, so not exactly
    half); FSDP stores half the parameters, gradients and state, plus its padding (each tensor's
    first dimension rounded up to a multiple of n: a few % of these small models)."""
    state = "optimizer_state_mib_per_rank"
    assert 0 < sharded[state] < ddp[state], (label, sharded[state], ddp[state])
    if label == "zero1":
        assert sharded["param_mib_per_rank"] == ddp["param_mib_per_rank"]
        return
    for part in ("param_mib_per_rank", "grad_mib_per_rank", state):
        assert sharded[part] <= 0.55 * ddp[part], (label, part, sharded[part], ddp[part])


def test_lars_sees_whole_norms_through_sharded_parameters(dpsuite, tmp_path):
    """LARS scales each tensor by its norms: FSDP's shards must give the whole tensor's norms
    (a shard's own norm moves them by 2.5e-4 in 4 steps here), ZeRO's whole tensors do."""
    workload = [*WORKLOADS["mnist1d_mlp"], "lr_rule=lars"]
    ddp = read_params(train(dpsuite, tmp_path / "ddp", workload, []))
    for label in ("zero1", "fsdp3"):
        params = read_params(train(dpsuite, tmp_path / label, workload, STRATEGIES[label]))
        worst = max(float(np.max(np.abs(params[k] - ddp[k]))) for k in ddp)
        # The norm of a sharded tensor adds its shards' squares in another order: rounding.
        assert worst <= TOLERANCE, (label, worst)
