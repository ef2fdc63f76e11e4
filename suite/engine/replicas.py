"""The N replicas of a run and how their gradients are averaged: one interface, two kinds.

* ``RankReplicas``: one replica per process. With more than one rank, the synchronization
  strategy wraps the model (DistributedDataParallel for all but the parameter server) and
  averages the gradients during backward or right after it.
* ``SimulatedReplicas``: N virtual workers in one process. Each step accumulates the mean of
  their micro-batch gradients before one optimizer step: the same training as N real DDP
  workers (BatchNorm statistics per worker, rank 0's kept, as DDP's ``broadcast_buffers``).

Either way, after ``forward_backward(idx)`` the model's ``.grad`` holds the workers' averaged
gradient, and the batches come from one global shuffle per epoch (``dpsuite.engine.batch_sources``).
For the gradient noise scale a replica set also says how it can see the pieces of a step's
batch before they are averaged (``piece_recorder``, with the recorders of
``dpsuite.measure.noise_scale``).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from torch import Tensor, nn

from dpsuite.engine.batch_sources import BatchSource
from dpsuite.measure.noise_scale import (
    HalvesRecorder,
    LocalGradientRecorder,
    MicroBatchRecorder,
    PieceRecorder,
    squared_norm,
)
from dpsuite.optim.precision import Precision
from dpsuite.runtime.ranks import Ranks
from dpsuite.sync.base import SyncStrategy
from dpsuite.workloads import batch_tree

# The mean loss of a batch (as the batch source gives it) through a module.
LossOf = Callable[[nn.Module, Any], Tensor]


def loss_under_autocast(loss_of: LossOf, precision: Precision) -> LossOf:
    """``loss_of`` run under the run's autocast (mixed precision), or ``loss_of`` itself where
    there is none (no context to enter and leave on every step)."""
    if not precision.autocasts:
        return loss_of

    def autocast_loss(net: nn.Module, batch: Any) -> Tensor:
        with precision.autocast():
            return loss_of(net, batch)

    return autocast_loss


def has_batch_dependent_layers(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def gradients(model: nn.Module) -> list[Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


class Replicas(ABC):
    """The model replicas of one run, as this process sees them."""

    model: nn.Module  # the parameters the optimizer steps
    net: nn.Module  # what forward and backward run through (DDP-wrapped or the model)
    devices: int  # devices doing the run's work (for FLOP/s per device)
    noise_method: str | None = None  # how pieces are seen: ranks, micro_batches, halves

    @abstractmethod
    def batches(self) -> Iterator[tuple[int, Any]]:
        """(epoch, this process's batch) for every step, epoch after epoch, without end."""

    @abstractmethod
    def forward_backward(self, batch: Any) -> Tensor:
        """The step's loss (detached); the averaged gradient is in ``.grad`` afterwards."""

    def after_step(self) -> None:  # noqa: B027 (most replica sets exchange nothing here)
        """After the optimizer step: parameter exchanges (local SGD's model averaging)."""

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Inside: the same steps without any communication (calibration)."""
        return contextlib.nullcontext()

    def eval_model(self) -> nn.Module:
        """The model to evaluate and save (every rank calls it at the same points)."""
        return self.model

    @abstractmethod
    def piece_recorder(self) -> PieceRecorder | None:
        """How this run sees the pieces of a batch, or None when it cannot."""


class RankReplicas(Replicas):
    """One replica per rank (one in total without a process group)."""

    def __init__(
        self,
        model: nn.Module,
        strategy: SyncStrategy,
        ranks: Ranks,
        per_worker: int,
        seed: int,
        source: BatchSource,
        precision: Precision,
        bucket_cap_mb: float,
        split_single: bool,
    ) -> None:
        self.model, self.strategy, self.ranks = model, strategy, ranks
        self.per_worker, self.seed = per_worker, seed
        self.source, self.precision = source, precision
        self.loss_of = loss_under_autocast(source.loss_of, precision)
        self.net = strategy.wrap(model, bucket_cap_mb)
        self.devices = 1
        self.communicate = True
        self.split_single = split_single
        self.last_batch: Any = None
        # Whether the strategy exchanges anything outside DDP (the base class's methods do
        # nothing): a call per step that does nothing still shows on a millisecond step.
        own = type(strategy)
        self.syncs_gradients = own.sync_gradients is not SyncStrategy.sync_gradients
        self.exchanges_after_step = own.after_step is not SyncStrategy.after_step

    def batches(self) -> Iterator[tuple[int, Any]]:
        world, rank = self.ranks.world_size, self.ranks.rank
        return self.source.rank_steps(world, rank, self.per_worker, self.seed)

    def forward_backward(self, batch: Any) -> Tensor:
        self.last_batch = batch
        loss = self.loss_of(self.net, batch)
        self.precision.backward(loss)
        if self.communicate and self.syncs_gradients:
            self.strategy.sync_gradients(self.model)
        return loss.detach()

    def after_step(self) -> None:
        if self.communicate and self.exchanges_after_step:
            self.strategy.after_step(self.model)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        quiet = getattr(self.net, "no_sync", contextlib.nullcontext)
        self.communicate = False
        try:
            with quiet():
                yield
        finally:
            self.communicate = True

    def eval_model(self) -> nn.Module:
        return self.strategy.eval_model(self.model)

    def piece_recorder(self) -> PieceRecorder | None:
        if self.ranks.world_size > 1:
            if not self.strategy.averages_gradients:
                return None
            self.noise_method = "ranks"
            return LocalGradientRecorder(self.model)
        if self.split_single and not has_batch_dependent_layers(self.model):
            self.noise_method = "halves"
            return HalvesRecorder(self)
        return None


class SimulatedReplicas(Replicas):
    """N virtual workers in one process (``mode=simulated``)."""

    def __init__(
        self,
        model: nn.Module,
        workers: int,
        per_worker: int,
        seed: int,
        source: BatchSource,
        precision: Precision,
        split_single: bool,
    ) -> None:
        self.model = self.net = model
        self.workers, self.per_worker, self.seed = workers, per_worker, seed
        self.source, self.precision = source, precision
        self.loss_of = loss_under_autocast(source.loss_of, precision)
        self.fused = not has_batch_dependent_layers(model)
        self.devices = 1  # one device does all the workers' work
        self.split_single = split_single
        self.norms: list[Tensor] | None = None  # filled per micro-batch while recording
        self.last_batch: list[Any] | None = None

    def batches(self) -> Iterator[tuple[int, list[Any]]]:
        return self.source.simulated_steps(self.workers, self.per_worker, self.seed)

    def forward_backward(self, batch: list[Any]) -> Tensor:
        self.last_batch = batch
        return simulated_step(
            self.model, self.loss_of, batch, self.fused, self.precision, self.norms
        )

    def piece_recorder(self) -> PieceRecorder | None:
        if self.workers > 1 and not self.fused:
            self.noise_method = "micro_batches"
            return MicroBatchRecorder(self)
        if self.workers > 1 or (self.split_single and self.fused):
            self.noise_method = "halves"
            return HalvesRecorder(self)
        return None


def simulated_step(
    model: nn.Module,
    loss_of: LossOf,
    shards: list[Any],
    fused: bool,
    precision: Precision,
    norms: list[Tensor] | None = None,
) -> Tensor:
    """One step's gradients for N virtual workers: the mean of their micro-batch gradients.

    With ``norms`` (and micro-batches run one by one) each micro-batch's squared gradient norm
    is appended, for the noise scale; the gradients are the same either way.
    """
    if fused:  # no batch-dependent layers: one pass over the union is the same computation
        loss = loss_of(model, batch_tree.cat(shards))
        precision.backward(loss)
        return loss.detach()
    n = len(shards)
    total, rank0_buffers, before = 0.0, None, None
    for r, shard in enumerate(shards):
        loss = loss_of(model, shard)
        precision.backward(loss / n)
        total = total + loss.detach()
        if r == 0:
            rank0_buffers = [b.detach().clone() for b in model.buffers()]
        if norms is not None:  # this micro-batch's gradient is what the sum grew by
            grads = gradients(model)
            grown = grads if before is None else [g - b for g, b in zip(grads, before, strict=True)]
            norms.append(squared_norm(grown) * n**2)
            if r + 1 < n:
                before = [g.detach().clone() for g in grads]
    # DDP broadcasts rank 0's buffers (BatchNorm statistics) each step: keep rank 0's.
    for b, saved in zip(model.buffers(), rank0_buffers or [], strict=False):
        b.copy_(saved)
    return total / n
