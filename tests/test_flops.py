"""Model FLOPs per sample and MFU."""

import pytest
import torch
from torch import nn

from dpsuite.measure.flops import training_flops_per_sample, utilization


def test_flops_of_a_linear_layer_match_a_hand_count():
    model = nn.Linear(10, 5, bias=False)
    x = torch.randn(4, 10)

    def loss_of(m, idx):
        return m(x[idx]).sum()

    before = [p.detach().clone() for p in model.parameters()]
    per_sample = training_flops_per_sample(model, loss_of, torch.arange(2))
    # forward x @ W^T: 2*10*5 per sample; backward dW = g^T x: the same (the input needs no grad)
    assert per_sample == 2 * (2 * 10 * 5)
    assert model.weight.grad is None and torch.equal(before[0], model.weight)  # nothing touched
    assert model.training


def test_utilization_per_device_and_against_the_peak():
    got = utilization(flops_per_sample=3e9, samples_per_s=2000.0, devices=2, peak_tflops=10.0)
    assert got["model_tflops_per_device"] == pytest.approx(3.0)
    assert got["mfu"] == pytest.approx(0.3)
    assert utilization(3e9, 2000.0, 2, None)["mfu"] is None
    assert utilization(None, 2000.0, 2, 10.0)["model_tflops_per_device"] is None


def test_counting_leaves_batchnorm_statistics_and_the_random_stream_alone():
    model = nn.Sequential(nn.Linear(10, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    x = torch.randn(4, 10)
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()

    def loss_of(m, idx):
        return m(x[idx]).sum()

    assert training_flops_per_sample(model, loss_of, torch.arange(2)) > 0
    assert all(torch.equal(buffers[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state()) and model.training
