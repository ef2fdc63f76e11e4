"""LARS against a hand computation."""

import math

import pytest
import torch
from torch import nn

from dpsuite.optim.lars import LARS, lars_param_groups, trust_ratio


def test_trust_ratio_formula():
    assert trust_ratio(2.0, 0.5, 0.001, 0.0) == pytest.approx(0.004)
    assert trust_ratio(2.0, 0.5, 0.001, 0.1) == pytest.approx(0.001 * 2.0 / (0.5 + 0.2))
    assert trust_ratio(0.0, 0.5, 0.001, 0.1) == 1.0
    assert trust_ratio(2.0, 0.0, 0.001, 0.1) == 1.0


def test_two_steps_by_hand():
    layer = nn.Linear(2, 1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 4.0]]))  # |w| = 5
        layer.bias.copy_(torch.tensor([1.0]))
    opt = LARS(
        lars_param_groups(layer, weight_decay=0.01), lr=2.0, momentum=0.9, trust_coefficient=0.02
    )
    g_w, g_b = torch.tensor([[0.6, 0.8]]), torch.tensor([0.5])  # |g_w| = 1
    layer.weight.grad, layer.bias.grad = g_w.clone(), g_b.clone()
    opt.step()
    local = 0.02 * 5 / (1 + 0.01 * 5)
    v_w = 2.0 * local * (g_w + 0.01 * torch.tensor([[3.0, 4.0]]))
    w1 = torch.tensor([[3.0, 4.0]]) - v_w
    assert torch.allclose(layer.weight, w1)
    assert torch.allclose(layer.bias, torch.tensor([1.0 - 2.0 * 0.5]))  # excluded: plain SGD

    layer.weight.grad, layer.bias.grad = g_w.clone(), g_b.clone()
    opt.step()
    local2 = 0.02 * float(w1.norm()) / (1 + 0.01 * float(w1.norm()))
    v_w2 = 0.9 * v_w + 2.0 * local2 * (g_w + 0.01 * w1)
    assert torch.allclose(layer.weight, w1 - v_w2)
    assert torch.allclose(layer.bias, torch.tensor([0.0 - (0.9 * 1.0 + 1.0)]))
    assert math.isclose(local, 0.0952380952, rel_tol=1e-9)


def test_groups_exclude_biases_and_norms():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    adapted, excluded = lars_param_groups(model, 1e-4)
    assert [p.ndim for p in adapted["params"]] == [2, 2]
    assert all(p.ndim == 1 for p in excluded["params"]) and len(excluded["params"]) == 4
    assert excluded["weight_decay"] == 0.0 and not excluded["lars"]
