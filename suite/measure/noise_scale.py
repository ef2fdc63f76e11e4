"""Gradient noise scale from data parallelism (McCandlish et al. 2018, Appendix A).

Each worker's local gradient is an estimate at batch ``B_small`` (the per-worker batch); the
all-reduced gradient is one at ``B_big = N * B_small``. From the two squared norms:

    |G|^2   ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(S)   ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

Both are unbiased but noisy, and the ratio of noisy estimates is biased, so both are summed over
a window of at least ``noise_scale.window_steps`` training steps before ``B_simple = tr(S) /
|G|^2`` is taken: one value per window, and one pooled over the whole run.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from dpsuite.measure.probes import Probe
from dpsuite.optim.precision import Precision
from dpsuite.workloads import batch_tree


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
class PooledEstimate:
    """Unbiased estimates of |G|^2 and tr(Sigma) summed over measured steps: their ratio is
    B_simple for the steps pooled. The ratio of two noisy single-step estimates is biased (and
    often negative); pooled over a hundred steps or more, both sums are stable."""

    g2: float = 0.0
    trace: float = 0.0
    count: int = 0

    def add(self, g2: float, trace: float) -> None:
        self.g2 += g2
        self.trace += trace
        self.count += 1

    @property
    def grad_sq(self) -> float | None:
        return self.g2 / self.count if self.count else None

    @property
    def mean_trace(self) -> float | None:
        return self.trace / self.count if self.count else None

    @property
    def b_simple(self) -> float | None:
        """tr(Sigma) / |G|^2, or None while nothing is pooled or |G|^2 is not positive."""
        if not self.count or self.g2 <= 0:
            return None
        return self.trace / self.g2


# ---- measuring it during training ------------------------------------------------------------
# How a measured step splits its batch into pieces whose gradients are seen one by one (the
# `method` of a run; `dpsuite.engine.replicas` chooses and records them):
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


WIDE = (torch.float32, torch.float64)  # half-precision gradients' squares would overflow


def norm(tensor: torch.Tensor) -> torch.Tensor:
    """The 2-norm, in float32 or wider, without a host sync: one kernel."""
    wide = None if tensor.dtype in WIDE else torch.float32
    return torch.linalg.vector_norm(tensor.detach(), dtype=wide)


def norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's 2-norm, in float32 or wider, without a host sync: one fused kernel for all
    of them where they are all wide or all half precision (as ``clip_grad_norm_`` takes them)."""
    dtypes = {t.dtype for t in tensors}
    if dtypes.issubset(WIDE):
        return list(torch._foreach_norm(tensors))
    if dtypes.isdisjoint(WIDE):
        return list(torch._foreach_norm(tensors, 2, dtype=torch.float32))
    return [norm(t) for t in tensors]


def squared_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' summed squares, in float32 or wider, without a host sync (``norms``)."""
    if not tensors:
        return torch.zeros(())
    return torch.stack(norms(tensors)).square().sum()


class NoiseScaleMeter:
    """B_simple from measured steps, pooled over windows, and logged per evaluation.

    A measured step gives one pair (|G_small|^2, |G_big|^2): the mean squared norm of the
    pieces' gradients, and that of the step's (averaged) gradient. Nothing extra crosses the
    network per step: with real workers each rank keeps its local norms and they are summed
    across ranks as a few scalars at the loop's next evaluation (:meth:`sync`).
    """

    def __init__(
        self,
        method: str | None,
        every: int,  # measure on every ``every``-th step
        window_steps: int,  # training steps pooled into one value
        b_small: float,
        b_big: int,
        device: torch.device,
        world_size: int = 1,
    ) -> None:
        self.method, self.every, self.window_steps = method, max(1, every), window_steps
        self.b_small, self.b_big = b_small, b_big
        self.device, self.world_size = device, world_size
        self.run = PooledEstimate()  # every measured step of the run
        self.window = PooledEstimate()  # the steps since the last window closed
        self.window_start: int | None = None
        self.windows: list[PooledEstimate] = []  # closed windows
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (step, small, big)

    def next_measured(self, step: int) -> int | None:
        """The first step from ``step`` on that is measured (None: none is)."""
        return None if self.method is None else step + (-(step + 1)) % self.every

    def add_pieces(
        self,
        step: int,
        piece_norms: list[torch.Tensor],
        grads: list[torch.Tensor],
        scale: float = 1.0,
    ) -> None:
        """One measured step: its pieces' squared norms (this rank's) and its averaged
        gradient; ``scale`` is fp16's loss scale, by which both are multiplied."""
        small = piece_norms[0] if len(piece_norms) == 1 else torch.stack(piece_norms).mean()
        big = squared_norm(grads)
        if scale != 1.0:  # fp16's loss scaling (dividing by 1 would be two more ops per step)
            small, big = small / scale**2, big / scale**2
        self._pending.append((step, small, big))

    def sync(self) -> None:
        """Fold the pending measurements into the sums (real workers: sum local norms over
        ranks), closing a window each time one spans ``window_steps``."""
        if not self._pending:
            return
        steps = [step for step, _, _ in self._pending]
        small = torch.stack([s for _, s, _ in self._pending]).double().tolist()
        big = torch.stack([b for _, _, b in self._pending]).double().tolist()
        self._pending.clear()
        if self.method == "ranks":
            from dpsuite.runtime import distributed

            small = [s / self.world_size for s in distributed.all_reduce_sum(small, self.device)]
        for step, s, b in zip(steps, small, big, strict=True):
            g2, trace = unbiased_estimates(s, b, self.b_small, self.b_big)
            if not (math.isfinite(g2) and math.isfinite(trace)):
                continue  # a diverging run: keep what was measured before
            if self.window_start is None:
                self.window_start = step
            self.run.add(g2, trace)
            self.window.add(g2, trace)
            if step + 1 - self.window_start >= self.window_steps:
                self.windows.append(self.window)
                self.window, self.window_start = PooledEstimate(), None

    @property
    def latest(self) -> PooledEstimate:
        """The last closed window (the run so far while none has closed)."""
        return self.windows[-1] if self.windows else self.run

    def record_evaluation(self) -> dict[str, float | None]:
        """The epochs.csv columns at an evaluation: the latest window's values."""
        latest = self.latest
        return {
            "grad_noise_scale": latest.b_simple,
            "gns_grad_sq": latest.grad_sq,
            "gns_trace": latest.mean_trace,
        }

    def summary(self) -> dict[str, float | int | str | None] | None:
        """run.json metrics.grad_noise_scale: the last window's B_simple, the mean over windows,
        the value pooled over the whole run, the pooled estimates, and how they were made."""
        if self.method is None or not self.run.count:
            return None
        values = [w.b_simple for w in self.windows if w.b_simple is not None]
        return {
            "final": self.latest.b_simple,
            "mean": sum(values) / len(values) if values else None,
            "pooled": self.run.b_simple,
            "grad_sq": self.run.grad_sq,
            "trace": self.run.mean_trace,
            "b_small": self.b_small,
            "b_big": self.b_big,
            "estimates": self.run.count,
            "windows": len(self.windows),
            "window_steps": self.window_steps,
            "every_steps": self.every,
            "method": self.method,
        }


class NoiseScaleProbe(Probe):
    """Measures B_simple on every ``every``-th step through the replicas' piece recorder."""

    def __init__(
        self,
        meter: NoiseScaleMeter,
        recorder: PieceRecorder,
        gradients: Callable[[], list[torch.Tensor]],
        loss_scale: Callable[[], float],
    ) -> None:
        self.meter, self.recorder = meter, recorder
        self.gradients, self.loss_scale = gradients, loss_scale

    def next_due(self, step: int) -> int | None:
        return self.meter.next_measured(step)  # the steps between: not called at all

    def on_step_start(self, step: int) -> None:
        self.recorder.start()

    def on_backward_end(self, step: int) -> None:
        pieces = self.recorder.pieces()
        self.meter.add_pieces(step, pieces, self.gradients(), self.loss_scale())

    # Folded in at evaluations and at the end, where every rank meets anyway: a training step
    # outside them makes no collective and reads nothing back for the noise scale.
    def on_eval(self, row: dict[str, Any]) -> None:
        self.meter.sync()
        row.update(self.meter.record_evaluation())

    def metrics(self) -> dict[str, Any]:
        self.meter.sync()
        return {"grad_noise_scale": self.meter.summary()}


# ---- the pieces of a step's batch, as each kind of replicas can see them ----------------------


class PieceRecorder(ABC):
    """Squared gradient norms of the pieces of one step's batch, for the noise scale."""

    @abstractmethod
    def start(self) -> None:
        """Called before the measured step's forward pass."""

    @abstractmethod
    def pieces(self) -> list[Tensor]:
        """After backward: one squared norm per piece (this rank's pieces)."""


def half_batch_norms(
    model: nn.Module,
    loss_of: Callable[[nn.Module, Any], Tensor],
    batch: Any,
    precision: Precision,
) -> list[Tensor]:
    """Squared gradient norms of the two halves of a batch whose gradient is in ``.grad``
    (a batch, or the list of simulated workers' batches taken as one).

    One extra forward and backward pass over the first half, kept out of ``.grad`` (and of the
    random number stream): the second half's gradient follows from the whole's, so the
    training is exactly what it would have been without the measurement.
    """
    whole = batch_tree.cat(batch) if isinstance(batch, list) else batch
    first, second = batch_tree.halves(whole)
    params = [p for p in model.parameters() if p.grad is not None]
    devices = sorted({t.device for t in batch_tree.tensors(whole) if t.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        loss = loss_of(model, first)
        scaled = precision.scaler.scale(loss) if precision.scaler else loss
        g_first = torch.autograd.grad(scaled, params)
    n, n1 = batch_tree.size(whole), batch_tree.size(first)
    n2 = n - n1
    g_second = [(n * p.grad - n1 * g) / n2 for p, g in zip(params, g_first, strict=True)]
    return [squared_norm(list(g_first)), squared_norm(g_second)]


class LocalGradientRecorder(PieceRecorder):
    """This rank's local gradient, read as each parameter's gradient is accumulated: before DDP
    (or the parameter server) averages it. Hooks exist only during a measured step."""

    def __init__(self, model: nn.Module) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.norms: list[Tensor] = []
        self.handles: list[Any] = []

    def start(self) -> None:
        self.norms = []
        self.handles = [p.register_post_accumulate_grad_hook(self._read) for p in self.params]

    def _read(self, param: Tensor) -> None:
        self.norms.append(norm(param.grad))

    def pieces(self) -> list[Tensor]:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        return [torch.stack(self.norms).square().sum() if self.norms else torch.zeros(())]


class MicroBatchRecorder(PieceRecorder):
    """Simulated workers with batch statistics: each worker's micro-batch gradient (the
    replicas append one squared norm per micro-batch to their ``norms`` while it is a list)."""

    def __init__(self, replicas: Any) -> None:
        self.replicas = replicas

    def start(self) -> None:
        self.replicas.norms = []

    def pieces(self) -> list[Tensor]:
        norms, self.replicas.norms = self.replicas.norms or [], None
        return norms


class HalvesRecorder(PieceRecorder):
    """One process without batch statistics: the two halves of the step's batch."""

    def __init__(self, replicas: Any) -> None:  # model, loss_of, last_batch, precision
        self.replicas = replicas

    def start(self) -> None:
        pass

    def pieces(self) -> list[Tensor]:
        r = self.replicas
        assert r.last_batch is not None
        return half_batch_norms(r.model, r.loss_of, r.last_batch, r.precision)
