"""Gradient noise scale from data parallelism (McCandlish et al. 2018, Appendix A).

Each worker's local gradient is an estimate at batch ``B_small`` (the per-worker batch); the
all-reduced gradient is one at ``B_big = N * B_small``. From the two squared norms:

    |G|^2   ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(S)   ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

Both are unbiased but noisy; the ratio of noisy estimates is biased, so each is smoothed with an
exponential moving average (bias-corrected like Adam's moments) before ``B_simple = tr(S) / |G|^2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from suite.measure.probes import Probe


def unbiased_estimates(
    g_small_sq: float, g_big_sq: float, b_small: float, b_big: float
) -> tuple[float, float]:
    """(|G|^2, tr(Sigma)) from one pair of squared gradient norms."""
    if not b_big > b_small > 0:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
    g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


@dataclass
class NoiseScaleEMA:
    """Bias-corrected moving averages of |G|^2 and tr(Sigma), and their ratio B_simple."""

    beta: float
    _g2: float = 0.0
    _trace: float = 0.0
    _n: int = 0

    def update(self, g_small_sq: float, g_big_sq: float, b_small: float, b_big: float) -> None:
        g2, trace = unbiased_estimates(g_small_sq, g_big_sq, b_small, b_big)
        if not (math.isfinite(g2) and math.isfinite(trace)):
            return  # a diverging run: keep the last good estimate
        self._g2 = self.beta * self._g2 + (1 - self.beta) * g2
        self._trace = self.beta * self._trace + (1 - self.beta) * trace
        self._n += 1

    @property
    def count(self) -> int:
        return self._n

    def _corrected(self, value: float) -> float:
        return value / (1 - self.beta**self._n)

    @property
    def grad_sq(self) -> float | None:
        return self._corrected(self._g2) if self._n else None

    @property
    def trace(self) -> float | None:
        return self._corrected(self._trace) if self._n else None

    @property
    def b_simple(self) -> float | None:
        """tr(Sigma) / |G|^2, or None before any update or while |G|^2 is not positive."""
        if not self._n or self._g2 <= 0:
            return None
        return self._trace / self._g2


# ---- measuring it during training ------------------------------------------------------------
# How a measured step splits its batch into pieces whose gradients are seen one by one (the
# `method` of a run; `suite.engine.replicas` chooses and records them):
#   ranks          real workers: each rank's local gradient, before it is averaged
#   micro_batches  simulated workers with batch-dependent layers: each worker's micro-batch
#   halves         one process otherwise: the two halves of the global batch


def piece_batches(method: str, per_worker: int, global_batch: int) -> tuple[float, int]:
    """(B_small, B_big). Pieces of unequal size (odd halves) count by their harmonic mean:
    E|g_i|^2 = |G|^2 + tr(Sigma)/B_i, so the mean over pieces has 1/B_small = mean(1/B_i)."""
    if method == "halves":
        first, second = (global_batch + 1) // 2, global_batch // 2
        return 2.0 / (1.0 / first + 1.0 / second), global_batch
    return float(per_worker), global_batch


def sum_of_squares(tensor: torch.Tensor) -> torch.Tensor:
    """In float32 or wider (half-precision gradients would overflow), without a host sync."""
    wide = tensor.detach()
    if wide.dtype not in (torch.float32, torch.float64):
        wide = wide.float()
    return wide.pow(2).sum()


def squared_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    if not tensors:
        return torch.zeros(())
    return torch.stack([sum_of_squares(t) for t in tensors]).sum()


class NoiseScaleMeter:
    """B_simple from measured steps, smoothed, and logged per evaluation.

    A measured step gives one pair (|G_small|^2, |G_big|^2): the mean squared norm of the
    pieces' gradients, and that of the step's (averaged) gradient. Nothing extra crosses the
    network per step: with real workers each rank keeps its local norms and they are summed
    across ranks as a few scalars when the loop next checks its losses (:meth:`sync`).
    """

    def __init__(
        self,
        method: str | None,
        every: int,  # measure on every ``every``-th step
        beta: float,
        b_small: float,
        b_big: int,
        device: torch.device,
        world_size: int = 1,
    ) -> None:
        self.method, self.every = method, max(1, every)
        self.b_small, self.b_big = b_small, b_big
        self.device, self.world_size = device, world_size
        self.ema = NoiseScaleEMA(beta=beta)
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (local small, big)
        self.per_eval: list[float] = []

    def measures(self, step: int) -> bool:
        return self.method is not None and (step + 1) % self.every == 0

    def add_pieces(
        self, piece_norms: list[torch.Tensor], grads: list[torch.Tensor], scale: float = 1.0
    ) -> None:
        """One measured step: its pieces' squared norms (this rank's) and its averaged
        gradient; ``scale`` is fp16's loss scale, by which both are multiplied."""
        small = torch.stack(piece_norms).mean()
        self._pending.append((small / scale**2, squared_norm(grads) / scale**2))

    def sync(self) -> None:
        """Fold the pending measurements into the averages (DDP: sum local norms over ranks)."""
        if not self._pending:
            return
        small = torch.stack([s for s, _ in self._pending]).double().tolist()
        big = torch.stack([b for _, b in self._pending]).double().tolist()
        self._pending.clear()
        if self.method == "ranks":
            from suite.engine import distributed as dd

            small = [s / self.world_size for s in dd.all_reduce_sum(small, self.device)]
        for s, b in zip(small, big, strict=True):
            self.ema.update(s, b, self.b_small, self.b_big)

    def record_evaluation(self) -> dict[str, float | None]:
        """Note the value at an evaluation (for the run's mean); returns its epochs.csv columns."""
        value = self.ema.b_simple
        if value is not None:
            self.per_eval.append(value)
        return {
            "grad_noise_scale": value,
            "gns_grad_sq": self.ema.grad_sq,
            "gns_trace": self.ema.trace,
        }

    def summary(self) -> dict[str, float | int | str | None] | None:
        """run.json metrics.grad_noise_scale: B_simple at the last evaluation and its mean over
        evaluations (None while |G|^2 is not yet positive), the final averages, and how."""
        if self.method is None or not self.ema.count:
            return None
        return {
            "final": self.ema.b_simple,
            "mean": sum(self.per_eval) / len(self.per_eval) if self.per_eval else None,
            "grad_sq": self.ema.grad_sq,
            "trace": self.ema.trace,
            "b_small": self.b_small,
            "b_big": self.b_big,
            "estimates": self.ema.count,
            "every_steps": self.every,
            "method": self.method,
        }


class NoiseScaleProbe(Probe):
    """Measures B_simple on every ``every``-th step through the replicas' piece recorder."""

    def __init__(
        self,
        meter: NoiseScaleMeter,
        recorder: Any,  # suite.engine.replicas.PieceRecorder: start(), pieces()
        gradients: Callable[[], list[torch.Tensor]],
        loss_scale: Callable[[], float],
    ) -> None:
        self.meter, self.recorder = meter, recorder
        self.gradients, self.loss_scale = gradients, loss_scale
        self.measuring = False

    def on_step_start(self, step: int) -> None:
        self.measuring = self.meter.measures(step)
        if self.measuring:
            self.recorder.start()

    def after_backward(self, step: int) -> None:
        if self.measuring:
            self.meter.add_pieces(self.recorder.pieces(), self.gradients(), self.loss_scale())

    def on_check(self) -> None:
        self.meter.sync()

    def on_eval(self, row: dict[str, Any]) -> None:
        row.update(self.meter.record_evaluation())

    def metrics(self) -> dict[str, Any]:
        return {"grad_noise_scale": self.meter.summary()}
