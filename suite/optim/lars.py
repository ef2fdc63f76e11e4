"""LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, Algorithm 1).

For every weight tensor w with gradient g, a local rate ``eta * |w| / (|g| + beta * |w|)``
(trust coefficient eta, weight decay beta) scales the global LR:

    v <- m * v + lr * local * (g + beta * w)
    w <- w - v

Biases and normalisation parameters (tensors with one dimension or fewer) are excluded, as in
the paper's large-batch ResNet recipes: they take plain momentum SGD at the global LR, with no
weight decay.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.optim import Optimizer


def trust_ratio(w_norm: float, g_norm: float, eta: float, weight_decay: float) -> float:
    """The local LR multiplier; 1 where a norm is zero (nothing to scale against)."""
    if w_norm <= 0 or g_norm <= 0:
        return 1.0
    return eta * w_norm / (g_norm + weight_decay * w_norm)


def whole_norm(tensor: torch.Tensor) -> float:
    """The 2-norm of the whole tensor, also of a sharded one (a DTensor: FSDP's parameters and
    gradients), whose norm is completed across the ranks holding its shards."""
    norm = tensor.norm()
    full_tensor = getattr(norm, "full_tensor", None)
    return float(full_tensor() if callable(full_tensor) else norm)


def lars_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    adapted = [p for p in model.parameters() if p.ndim > 1]
    excluded = [p for p in model.parameters() if p.ndim <= 1]
    return [
        {"params": adapted, "weight_decay": weight_decay, "lars": True},
        {"params": excluded, "weight_decay": 0.0, "lars": False},
    ]


class LARS(Optimizer):
    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float,
        trust_coefficient: float,  # its default lives in the config (lr_rules.LARSRuleConfig)
        weight_decay: float = 0.0,
    ) -> None:
        defaults = dict(
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            lars=True,
            trust_coefficient=trust_coefficient,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = p.grad
                if group["lars"]:
                    local = trust_ratio(
                        whole_norm(p), whole_norm(update), group["trust_coefficient"], wd
                    )
                    update = (update + wd * p) * local
                elif wd:
                    update = update + wd * p
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = torch.zeros_like(p)
                buf.mul_(m).add_(update, alpha=lr)
                p.sub_(buf)
        return loss
