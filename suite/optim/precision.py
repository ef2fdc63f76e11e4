"""Numeric precision of a run: parameter dtype, autocast, and loss scaling for fp16."""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass
from typing import Any

import torch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def unsupported(precision: str, device: str) -> str | None:
    """Why ``precision`` cannot run on ``device``, or None when it can."""
    if precision == "fp16" and device != "cuda":
        return "precision=fp16 needs device=cuda (fp16 autocast is a GPU feature; use bf16 on CPU)"
    return None


@dataclass
class Precision:
    """How a step computes: fp32/fp64 parameters, optionally under bf16/fp16 autocast."""

    name: str
    device: torch.device
    scaler: Any = None  # torch.amp.GradScaler for fp16

    def __post_init__(self) -> None:
        if self.scaler is None:
            # Without loss scaling, the tensor's and the optimizer's own calls: no Python call
            # of ours around them on every step.
            self.backward = torch.Tensor.backward  # type: ignore[method-assign]
            self.step = operator.methodcaller("step")  # type: ignore[method-assign]

    @classmethod
    def create(cls, name: str, device: torch.device) -> Precision:
        scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        return cls(name, device, scaler)

    @property
    def param_dtype(self) -> torch.dtype:
        """Parameters (and float data) are kept in this dtype; autocast lowers the math."""
        return torch.float64 if self.name == "fp64" else torch.float32

    @property
    def autocasts(self) -> bool:
        """Whether steps run under autocast (bf16/fp16)."""
        return self.name in AUTOCAST_DTYPES

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to bf16/fp16, or nothing (a plain context: no cost per step in fp32)."""
        if self.name in AUTOCAST_DTYPES:
            return torch.autocast(self.device.type, dtype=AUTOCAST_DTYPES[self.name])
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def loss_scale(self) -> float:
        """The factor the gradients are currently multiplied by (fp16's loss scaling)."""
        return float(self.scaler.get_scale()) if self.scaler else 1.0

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict() if self.scaler else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler:
            self.scaler.load_state_dict(state)
