"""The noise-scale estimator on linear regression, where |G|^2 and tr(Sigma) are known exactly."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dpsuite import results
from dpsuite.engine.replicas import RankReplicas, SimulatedReplicas, simulated_step
from dpsuite.measure.noise_scale import (
    LocalGradientRecorder,
    NoiseScaleMeter,
    PooledEstimate,
    half_batch_norms,
    piece_batches,
    squared_norm,
    unbiased_estimates,
)
from dpsuite.optim.precision import Precision
from dpsuite.runtime.ranks import Ranks
from dpsuite.sync import STRATEGIES, SyncConfig, SyncStrategy
from tests.conftest import SMALL, only_run, read_params, read_run


def linreg_truth(delta: torch.Tensor, sigma: float) -> tuple[float, float]:
    """x ~ N(0, I), y = x.w* + eps, loss 0.5 (x.w - y)^2, delta = w - w*.

    G = delta; by Isserlis, Sigma = (|delta|^2 + sigma^2) I + delta delta^T.
    """
    d = delta.numel()
    g2 = float(delta @ delta)
    return g2, d * (g2 + sigma**2) + g2


def batch_grad(delta: torch.Tensor, sigma: float, b: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(b, delta.numel(), generator=gen, dtype=torch.float64)
    eps = sigma * torch.randn(b, generator=gen, dtype=torch.float64)
    residual = x @ delta - eps
    return (x * residual[:, None]).mean(0)


@pytest.mark.parametrize("workers,b_small", [(2, 16), (4, 8), (8, 32)])
def test_estimate_within_ten_percent_of_truth(workers, b_small):
    gen = torch.Generator().manual_seed(workers * 1000 + b_small)
    delta = torch.randn(20, generator=gen, dtype=torch.float64) * 0.5
    sigma = 1.5
    true_g2, true_trace = linreg_truth(delta, sigma)
    pooled = PooledEstimate()
    for _ in range(3000):
        local = [batch_grad(delta, sigma, b_small, gen) for _ in range(workers)]
        g_small_sq = sum(float(g @ g) for g in local) / workers  # mean of local norms
        big = torch.stack(local).mean(0)  # the all-reduced gradient
        pooled.add(*unbiased_estimates(g_small_sq, float(big @ big), b_small, workers * b_small))
    assert pooled.grad_sq == pytest.approx(true_g2, rel=0.10)
    assert pooled.mean_trace == pytest.approx(true_trace, rel=0.10)
    assert pooled.b_simple == pytest.approx(true_trace / true_g2, rel=0.10)


def test_single_pair_is_exact_on_noise_free_inputs():
    # With |G_small|^2 = |G|^2 + tr/B_small and |G_big|^2 = |G|^2 + tr/B_big, the estimates invert.
    g2, tr, bs, bb = 3.0, 120.0, 8, 32
    est = unbiased_estimates(g2 + tr / bs, g2 + tr / bb, bs, bb)
    assert est == pytest.approx((g2, tr))


def test_windows_pool_steps_and_skip_non_finite_pairs():
    meter = NoiseScaleMeter("halves", 1, 4, 8, 32, torch.device("cpu"))
    assert meter.summary() is None and meter.latest.b_simple is None
    exact = [torch.tensor(3.0 + 120 / 8)], [torch.tensor(3.0 + 120 / 32).sqrt()]
    for step in range(10):  # windows of 4 steps close after steps 3 and 7
        meter.add_pieces(step, *exact)
    meter.add_pieces(10, [torch.tensor(float("nan"))], [torch.tensor(1.0)])
    meter.sync()
    summary = meter.summary()
    assert summary["windows"] == 2 and summary["estimates"] == 10  # the NaN pair is left out
    assert summary["final"] == pytest.approx(40.0) and summary["pooled"] == pytest.approx(40.0)
    assert summary["grad_sq"] == pytest.approx(3.0) and summary["mean"] == pytest.approx(40.0)
    with pytest.raises(ValueError):
        unbiased_estimates(1.0, 1.0, 32, 32)


# ---- measured during training: the pieces' norms, the meter, the choice of method -----------


class HalfSquaredError:
    """The part of a workload the training step uses: 0.5 (prediction - target)^2, batch mean."""

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * (out.squeeze(-1) - y).pow(2).mean()


def linear_model(w: torch.Tensor) -> torch.nn.Linear:
    model = torch.nn.Linear(w.numel(), 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(w[None])
    return model


FP64 = Precision.create("fp64", torch.device("cpu"))


def loss_of(x, y):
    """The loss of a batch of indices through a module, as the replicas take it."""
    return lambda net, idx: HalfSquaredError().loss(net(x[idx]), y[idx])


def grad_of(model, x, y, idx: torch.Tensor) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    HalfSquaredError().loss(model(x[idx]), y[idx]).backward()
    return model.weight.grad.clone()


def problem(n: int = 12):
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 5, generator=gen).double(), torch.randn(n, generator=gen).double()
    return linear_model(torch.randn(5, generator=gen).double()), x, y


@pytest.mark.parametrize("n", [12, 13])  # odd: halves of 7 and 6
def test_half_batch_norms_match_each_half_and_leave_the_gradient_alone(n):
    model, x, y = problem(n)
    halves = torch.arange(n).tensor_split(2)
    separate = [grad_of(model, x, y, idx) for idx in halves]
    whole = grad_of(model, x, y, torch.arange(n))
    norms = half_batch_norms(model, loss_of(x, y), torch.arange(n), FP64)
    assert torch.equal(model.weight.grad, whole)  # the training step is untouched
    assert [float(v) for v in norms] == pytest.approx([float(g.pow(2).sum()) for g in separate])


def test_micro_batch_norms_are_each_workers_gradient():
    model, x, y = problem(12)
    shards = list(torch.arange(12).tensor_split(3))  # three simulated workers of 4
    separate = [grad_of(model, x, y, idx) for idx in shards]
    model.zero_grad(set_to_none=True)
    norms: list[torch.Tensor] = []
    simulated_step(model, loss_of(x, y), shards, False, FP64, norms)
    assert torch.allclose(model.weight.grad, torch.stack(separate).mean(0), atol=1e-12)
    assert [float(v) for v in norms] == pytest.approx([float(g.pow(2).sum()) for g in separate])


@pytest.mark.parametrize("batch", [32, 33])
def test_meter_on_linear_regression_lands_within_ten_percent(batch):
    gen = torch.Generator().manual_seed(batch)
    d, sigma = 10, 1.0
    w_star = torch.randn(d, generator=gen, dtype=torch.float64)
    delta = 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
    model = linear_model(w_star + delta)  # held fixed: the truth does not move
    true_g2, true_trace = linreg_truth(delta, sigma)
    b_small, b_big = piece_batches("halves", batch, batch)
    meter = NoiseScaleMeter("halves", 1, 3000, b_small, b_big, torch.device("cpu"))
    everything = torch.arange(batch)
    for step in range(3000):
        x = torch.randn(batch, d, generator=gen, dtype=torch.float64)
        y = x @ w_star + sigma * torch.randn(batch, generator=gen, dtype=torch.float64)
        grad_of(model, x, y, everything)
        norms = half_batch_norms(model, loss_of(x, y), everything, FP64)
        meter.add_pieces(step, norms, [model.weight.grad])
    meter.sync()
    summary = meter.summary()
    assert summary["grad_sq"] == pytest.approx(true_g2, rel=0.10)
    assert summary["trace"] == pytest.approx(true_trace, rel=0.10)
    assert meter.record_evaluation()["grad_noise_scale"] == pytest.approx(
        true_trace / true_g2, rel=0.10
    )


def test_local_gradient_recorder_reads_each_gradient_as_it_is_accumulated():
    model, x, y = problem(12)
    recorder = LocalGradientRecorder(model)
    recorder.start()
    whole = grad_of(model, x, y, torch.arange(12))
    (piece,) = recorder.pieces()
    assert float(piece) == pytest.approx(float(whole.pow(2).sum()))
    assert not model.weight._post_accumulate_grad_hooks, "hooks only during a measured step"


def bn_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4)).double()


@pytest.mark.parametrize(
    "kind,workers,batch_dependent,split,expected",
    [
        ("simulated", 4, True, False, "micro_batches"),
        ("simulated", 4, False, False, "halves"),
        ("simulated", 1, True, True, None),  # halves would change BatchNorm's statistics
        ("simulated", 1, False, True, "halves"),
        ("rank", 1, False, False, None),  # one worker: only when asked
        ("rank", 1, False, True, "halves"),
        ("rank", 1, True, True, None),
    ],
)
def test_how_replicas_see_the_pieces(kind, workers, batch_dependent, split, expected):
    model = bn_model() if batch_dependent else linear_model(torch.ones(5, dtype=torch.float64))
    source = SimpleNamespace(loss_of=loss_of(*problem(12)[1:]))  # what the replicas take of it
    if kind == "simulated":
        replicas = SimulatedReplicas(model, workers, 8, 0, source, FP64, split)
    else:
        strategy = SyncStrategy(SyncConfig(), torch.device("cpu"))
        replicas = RankReplicas(model, strategy, Ranks(0, 1, 0, 1), 8, 0, source, FP64, 25, split)
    assert (replicas.piece_recorder() is not None) == (expected is not None)
    assert replicas.noise_method == expected


def test_which_strategies_average_the_gradients():
    """Local SGD steps on local gradients and PowerSGD sends a low-rank approximation: neither
    forms the averaged gradient the estimator needs; nor does FSDP, whose ranks each hold a
    shard of it. The others do (ranks method), zero1 too (DDP's all-reduce, then a sharded
    optimizer step)."""
    averaging = {name for name, s in STRATEGIES.items() if s.averages_gradients}
    assert averaging == {"allreduce", "param_server", "fp16", "bf16", "zero1"}


@pytest.mark.parametrize(
    "overrides",
    [
        [*SMALL, "mode=simulated", "workers=4"],  # halves of the fused batch
        # BatchNorm: micro-batches one by one. A tiny ResNet: width 4, 400 images.
        ["mode=simulated", "workers=2", "workload=cifar_resnet", "workload.width=4"]
        + ["workload.num_samples=400", "batch.per_worker=8"],
        [*SMALL, "workers=1", "noise_scale.split_single=true"],
        [*SMALL, "workers=2"],  # each rank's local gradient, read as it is accumulated
    ],
    ids=["simulated-fused", "simulated-micro-batches", "one-worker-split", "ddp-ranks"],
)
def test_measuring_leaves_the_training_unchanged(dpsuite, tmp_path, overrides):
    common = ["train.max_steps=12", "threads_per_worker=1", "train.save_params=true", *overrides]
    off = [f"results_dir={tmp_path / 'off'}", "noise_scale.enabled=false"]
    assert dpsuite("run", *common, *off) == 0
    assert dpsuite("run", *common, f"results_dir={tmp_path / 'on'}", "noise_scale.every=1") == 0
    off_run, on_run = only_run(tmp_path / "off"), only_run(tmp_path / "on")
    off_params, on_params = read_params(off_run), read_params(on_run)
    assert all(np.array_equal(off_params[k], on_params[k]) for k in off_params)
    off_epochs, on_epochs = results.load_epochs(off_run), results.load_epochs(on_run)
    assert off_epochs["train_loss"].equals(on_epochs["train_loss"])
    assert off_epochs["grad_noise_scale"].isna().all()
    gns = read_run(on_run)["metrics"]["grad_noise_scale"]
    assert gns["estimates"] == 12 and gns["trace"] > 0


def test_measured_pairs_are_the_pieces_mean_and_the_gradient_norm_over_the_scale():
    meter = NoiseScaleMeter("halves", 1, 4, 8, 32, torch.device("cpu"))
    pieces, grads = [torch.tensor(2.0), torch.tensor(5.0)], [torch.tensor([3.0, 4.0])]
    meter.add_pieces(0, pieces, grads)
    meter.add_pieces(1, pieces[:1], grads, scale=2.0)
    meter.add_pieces(2, pieces[:1], grads)
    assert [(s.item(), b.item()) for _, s, b in meter._pending] == [
        (3.5, 25.0),
        (0.5, 6.25),
        (2.0, 25.0),
    ]


@pytest.mark.parametrize(
    "dtypes",
    [
        [torch.float32] * 3,
        [torch.float64] * 2,
        [torch.float16, torch.bfloat16],  # summed in float32: their squares would overflow
        [torch.float32, torch.float16],  # mixed: one norm at a time
    ],
)
def test_squared_norm_is_the_sum_of_squares_in_float32_or_wider(dtypes):
    g = torch.Generator().manual_seed(0)
    tensors = [(300 * torch.randn(7, 5, generator=g)).to(dt) for dt in dtypes]
    exact = sum(float(t.double().pow(2).sum()) for t in tensors)
    got = squared_norm(tensors)
    assert got.dtype in (torch.float32, torch.float64)
    assert float(got) == pytest.approx(exact, rel=1e-5)
    assert float(squared_norm([])) == 0.0


def test_the_noise_probe_is_due_on_measured_steps_only():
    meter = NoiseScaleMeter("ranks", 5, 100, 4.0, 8, torch.device("cpu"), 2)
    assert [meter.next_measured(s) for s in (0, 3, 4, 5, 9)] == [4, 4, 4, 9, 9]
    off = NoiseScaleMeter(None, 5, 100, 4.0, 8, torch.device("cpu"))
    assert off.next_measured(0) is None
