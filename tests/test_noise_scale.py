"""The noise-scale estimator on linear regression, where |G|^2 and tr(Sigma) are known exactly."""

import pytest
import torch

from suite.noise_scale import NoiseScaleEMA, unbiased_estimates


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
    ema = NoiseScaleEMA(beta=0.999)
    for _ in range(3000):
        local = [batch_grad(delta, sigma, b_small, gen) for _ in range(workers)]
        g_small_sq = sum(float(g @ g) for g in local) / workers  # mean of local norms
        big = torch.stack(local).mean(0)  # the all-reduced gradient
        ema.update(g_small_sq, float(big @ big), b_small, workers * b_small)
    assert ema.grad_sq == pytest.approx(true_g2, rel=0.10)
    assert ema.trace == pytest.approx(true_trace, rel=0.10)
    assert ema.b_simple == pytest.approx(true_trace / true_g2, rel=0.10)


def test_single_pair_is_exact_on_noise_free_inputs():
    # With |G_small|^2 = |G|^2 + tr/B_small and |G_big|^2 = |G|^2 + tr/B_big, the estimates invert.
    g2, tr, bs, bb = 3.0, 120.0, 8, 32
    est = unbiased_estimates(g2 + tr / bs, g2 + tr / bb, bs, bb)
    assert est == pytest.approx((g2, tr))


def test_bias_correction_and_guards():
    ema = NoiseScaleEMA(beta=0.9)
    assert ema.b_simple is None and ema.grad_sq is None
    ema.update(3.0 + 120 / 8, 3.0 + 120 / 32, 8, 32)
    assert ema.grad_sq == pytest.approx(3.0) and ema.b_simple == pytest.approx(40.0)
    ema.update(float("nan"), 1.0, 8, 32)
    assert ema.count == 1
    with pytest.raises(ValueError):
        unbiased_estimates(1.0, 1.0, 32, 32)
