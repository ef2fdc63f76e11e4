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
from dataclasses import dataclass

import torch


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

    beta: float = 0.95
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
# `method` of a run):
#   ranks          DDP: each rank's local gradient (seen in the comm hook, before the all-reduce)
#   micro_batches  simulated workers with batch-dependent layers: each worker's micro-batch
#   halves         one process otherwise: the two halves of the global batch
# Strategies whose synchronized gradient is the workers' average (up to rounding): the others
# (local SGD, PowerSGD, parameter server) never form |G_big|^2 the way the estimator needs.
AVERAGING_SYNCS = ("allreduce", "fp16", "bf16")


@dataclass(frozen=True)
class NoiseScaleSettings:
    """The `noise_scale` config group."""

    enabled: bool = True
    every: int = 50
    ema: float = 0.9
    split_single: bool = False


def choose_method(
    settings: NoiseScaleSettings,
    mode: str,
    workers: int,
    global_batch: int,
    sync: str,
    distributed: bool,
    batch_dependent: bool,
) -> str | None:
    """How this run measures the noise scale, or None when it cannot (or is told not to)."""
    if not settings.enabled:
        return None
    if distributed:
        return "ranks" if sync in AVERAGING_SYNCS else None
    if mode == "simulated" and workers > 1:
        return "micro_batches" if batch_dependent else "halves"
    # One worker: splitting the batch is only the same computation without batch statistics.
    if settings.split_single and not batch_dependent and global_batch >= 2:
        return "halves"
    return None


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
    """B_simple measured live on evenly spaced steps, smoothed, and logged per evaluation.

    A measured step gives one pair (|G_small|^2, |G_big|^2): the mean squared norm of the
    pieces' gradients, and that of the step's (averaged) gradient. Nothing extra crosses the
    network per step: with DDP each rank keeps its local norms and they are summed across ranks
    as a few scalars when the loop next synchronizes its losses (:meth:`sync`).
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
        self.active = False  # inside a measured DDP step: the comm hook reports buckets
        self._buckets: list[torch.Tensor] = []
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (local small, big)
        self.per_eval: list[float] = []

    def measures(self, step: int) -> bool:
        return self.method is not None and (step + 1) % self.every == 0

    # -- DDP: local norms from the comm hook, the averaged one after backward
    def begin_ddp_step(self) -> None:
        self.active, self._buckets = True, []

    def observe_bucket(self, flat_grads: torch.Tensor) -> None:
        """Called by the comm hook with a bucket's local gradients, before they are reduced."""
        if self.active:
            self._buckets.append(sum_of_squares(flat_grads))

    def end_ddp_step(self, grads: list[torch.Tensor], scale: float = 1.0) -> None:
        self.active = False
        local = torch.stack(self._buckets).sum() if self._buckets else torch.zeros(())
        self._pending.append((local / scale**2, squared_norm(grads) / scale**2))

    # -- one process: the pieces' norms were taken as their gradients accumulated
    def add_pieces(
        self, piece_norms: list[torch.Tensor], grads: list[torch.Tensor], scale: float = 1.0
    ) -> None:
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

    def row(self) -> dict[str, float | None]:
        """The epochs.csv columns at an evaluation."""
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
