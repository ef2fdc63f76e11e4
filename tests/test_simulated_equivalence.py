"""Simulated workers train exactly like real DDP workers (float64, same seed, same data order)."""

import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dpsuite.engine.batch_sources import worker_index_batches
from dpsuite.engine.replicas import has_batch_dependent_layers, simulated_step
from dpsuite.optim.precision import Precision
from dpsuite.runtime import distributed
from dpsuite.workloads import get_workload
from tests.conftest import SMALL, max_diff, only_run, read_params, read_run

COMMON = [
    *SMALL,
    "precision=fp64",
    "train.save_params=true",
    "threads_per_worker=1",
    "seed=5",
]


def params_of(dpsuite, out, *overrides: str) -> tuple[dict[str, np.ndarray], dict]:
    assert dpsuite("run", *COMMON, f"results_dir={out}", *overrides) == 0
    run = only_run(out)
    rec = read_run(run)
    assert rec["status"] == "complete", rec["error"]
    return read_params(run), rec


def init_model(workload: str, params: dict) -> torch.nn.Module:
    """The model every run starts from (seed 5, as in COMMON), in float64."""
    torch.manual_seed(5)
    return get_workload(workload, **params).build_model().double()


@pytest.mark.multiproc
@pytest.mark.parametrize(
    "workers,workload,rule,per_worker,params,steps",
    [
        (2, "mnist1d_mlp", "linear_warmup", 16, {}, 30),
        (4, "mnist1d_cnn", "sqrt", 8, {}, 30),
        # BatchNorm: the micro-batches run one by one. A tiny ResNet: width 4, 400 images.
        (2, "cifar_resnet", "linear", 8, {"width": 4, "num_samples": 400}, 8),
    ],
    ids=["mlp-2", "cnn-4", "resnet_bn-2"],
)
def test_simulated_equals_real_ddp(
    dpsuite, tmp_path, workers, workload, rule, per_worker, params, steps
):
    pick = [
        f"workload={workload}",
        f"lr_rule={rule}",
        f"workers={workers}",
        f"batch.per_worker={per_worker}",
        f"train.max_steps={steps}",
        "noise_scale.every=2",
        *(f"workload.{k}={v}" for k, v in params.items()),
    ]
    real, real_rec = params_of(dpsuite, tmp_path / "ddp", *pick, "mode=ddp")
    sim, sim_rec = params_of(dpsuite, tmp_path / "sim", *pick, "mode=simulated")
    start = {k: v.numpy() for k, v in init_model(workload, params).state_dict().items()}
    assert (real_rec["mode"], sim_rec["mode"]) == ("ddp", "simulated")
    assert sim_rec["workers"] == workers and sim_rec["global_batch"] == workers * per_worker
    assert sim_rec["hardware"]["oversubscribed"] is False  # one process, whatever N is
    assert max_diff(real, start) > 1e-3, "training must have moved the parameters"
    assert max_diff(real, sim) <= 1e-10
    # The noise scale: DDP ranks' local norms equal the simulated workers' micro-batch norms
    # (or, fused, the two halves' norms: the same pieces when there are two workers).
    real_gns, sim_gns = (r["metrics"]["grad_noise_scale"] for r in (real_rec, sim_rec))
    assert real_gns["method"] == "ranks" and real_gns["b_small"] == per_worker
    assert real_gns["estimates"] == sim_gns["estimates"] > 0
    if sim_gns["method"] == "halves":
        assert sim_gns["b_small"] == workers * per_worker / 2
    if sim_gns["b_small"] == per_worker:
        for key in ("grad_sq", "trace"):
            assert real_gns[key] == pytest.approx(sim_gns[key], rel=1e-8)


# ---- the non-fused path: per-worker micro-batches, BatchNorm statistics as DDP keeps them ----

STEPS, WORLD, PER_WORKER, LR = 6, 2, 16, 0.05
FP64 = Precision.create("fp64", torch.device("cpu"))


def bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(40, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)
    ).double()


def bn_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(256, 40, generator=g, dtype=torch.float64), torch.randint(
        0, 10, (256,), generator=g
    )


def _ddp_bn_worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    x, y = bn_data()
    model = bn_model()
    net = DDP(model)  # broadcast_buffers=True: rank 0's BatchNorm statistics win at each step
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for shards in worker_index_batches(x.shape[0], WORLD, PER_WORKER, seed=3, epoch=0)[:STEPS]:
        opt.zero_grad()
        loss_fn(net(x[shards[rank]]), y[shards[rank]]).backward()
        opt.step()
    if rank == 0:
        np.savez(out, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    # Drop DDP before leaving the group: a rank that exits while its peer's reducer threads
    # still talk to it can abort under gloo (what distributed.shutdown does for the suite's
    # own runs).
    del net, opt
    distributed.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FP64 = Precision.create("fp64", torch.device("cpu"))


def simulated_bn_state(fused: bool) -> dict[str, np.ndarray]:
    x, y = bn_data()
    model = bn_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    workload = get_workload("mnist1d_mlp")  # only its loss (cross-entropy) is used

    def loss_of(net, idx):
        return workload.loss(net(x[idx]), y[idx])

    for shards in worker_index_batches(x.shape[0], WORLD, PER_WORKER, 3, 0)[:STEPS]:
        opt.zero_grad()
        simulated_step(model, loss_of, shards, fused=fused, precision=FP64)
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.multiproc
def test_unfused_simulated_batchnorm_equals_real_ddp(tmp_path):
    out = tmp_path / "ddp.npz"
    mp.start_processes(_ddp_bn_worker, args=(free_port(), str(out)), nprocs=2, start_method="spawn")
    with np.load(out) as f:
        real = {k: f[k] for k in f.files}
    sim = simulated_bn_state(fused=False)
    assert has_batch_dependent_layers(bn_model())
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked"} <= real.keys()
    assert max_diff(real, sim) <= 1e-10
    # One pass over the union would normalise with the union's statistics: not what DDP does.
    assert max_diff(real, simulated_bn_state(fused=True)) > 1e-6


def test_fused_and_unfused_agree_without_batchnorm():
    workload = get_workload("mnist1d_mlp")
    x, y = bn_data()
    shards = worker_index_batches(x.shape[0], 4, 8, seed=0, epoch=0)[0]
    grads = []
    for fused in (True, False):
        torch.manual_seed(0)
        model = workload.build_model().double()
        loss = simulated_step(
            model, lambda net, idx: workload.loss(net(x[idx]), y[idx]), shards, fused, FP64
        )
        grads.append((float(loss), [p.grad.clone() for p in model.parameters()]))
    (loss_a, ga), (loss_b, gb) = grads
    assert loss_a == pytest.approx(loss_b, abs=1e-12)
    assert max(float((a - b).abs().max()) for a, b in zip(ga, gb, strict=True)) <= 1e-12
