"""The collectives each data-parallel strategy issues per step, their bytes on the wire and the
part of their time a step waits for.

* ``ddp``: DDP's bucketed all-reduce of the gradients, overlapped with the backward pass
  (``overlap.schedule``; the model's own term, not here);
* ``zero1`` (``torch.distributed.optim.ZeroRedundancyOptimizer`` over DDP): DDP's all-reduce,
  then, after each rank has stepped its share, one ``broadcast`` per parameter tensor from the
  rank that owns it (``_sync_params``: every handle waited for before ``step`` returns, so
  none of it overlaps anything);
* ``fsdp`` (``fully_shard``): per unit an all-gather of its parameters before its forward, again
  before its backward with ``reshard_after_forward`` (the root, gathered from its forward to
  its backward, once), and a reduce-scatter of its gradients after its backward.

Bytes follow the suite's traffic counter (``dpsuite.sync.counter``): what one rank sends, an
all-gather or reduce-scatter of a buffer (N-1)/N of it, an all-reduce 2(N-1)/N, the broadcasts
of one step (N-1)/N of the parameters (each rank sends its own share).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsuite.analysis.scaling import sharded_cost
from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.topology import Topology

STRATEGIES = ("ddp", "zero1", "fsdp")
# The suite's `sync` names of the strategies the model knows.
SYNC_NAMES = {"allreduce": "ddp", "zero1": "zero1", "fsdp": "fsdp"}

Unit = tuple[float, int]  # (parameter bytes, all-gathers per step)


@dataclass(frozen=True)
class Strategy:
    """How replicas agree: ``name`` one of STRATEGIES; for fsdp its units in the order
    ``fully_shard`` was applied (the root, holding what no unit does, last), whether a unit is
    resharded after its forward, and the wrapping policy that made the units."""

    name: str = "ddp"
    reshard: bool = True
    units: tuple[Unit, ...] = ()
    wrap: str = "blocks"  # fsdp's wrapping policy (``sync.wrap``) the units come from

    def label(self) -> str:
        if self.name != "fsdp":
            return self.name
        wrap = f", wrap {self.wrap}" if self.wrap != "blocks" else ""
        return f"fsdp (reshard {'on' if self.reshard else 'off'}{wrap})"


@dataclass(frozen=True)
class Comm:
    """A step's communication beyond DDP's all-reduce: its time, and the part of it exposed."""

    comm_s: float = 0.0
    exposed_s: float = 0.0


def whole_model_unit(param_bytes: float) -> tuple[Unit, ...]:
    """One unit holding every parameter (``sync.wrap=root``): the units when nothing better is
    known of the model."""
    return ((param_bytes, 1),)


def wire_bytes_per_step(
    strategy: Strategy, grad_bytes: float, tensor_bytes: tuple[float, ...], n: int
) -> float:
    """Bytes one rank sends per step, as the suite's counter records them."""
    if n <= 1:
        return 0.0
    share = (n - 1) / n
    if strategy.name == "fsdp":
        return sum(share * size * (gathers + 1) for size, gathers in strategy.units if size > 0)
    allreduce = 2 * share * grad_bytes
    if strategy.name == "zero1":
        return allreduce + share * sum(tensor_bytes or (grad_bytes,))
    return allreduce


def zero1_comm(
    top: Topology, tensor_bytes: tuple[float, ...], grad_bytes: float, n: int, library: Library
) -> Comm:
    """The broadcasts after ZeroRedundancyOptimizer's step: one per parameter tensor, one after
    another, all waited for."""
    sizes = tensor_bytes or (grad_bytes,)
    took = sum(sharded_cost.broadcast_s(top, size, n, library) for size in sizes)
    return Comm(took, took)


def latencies_s(
    strategy: Strategy, top: Topology, tensor_bytes: tuple[float, ...], n: int, library: Library
) -> float:
    """The latency part (the time at 0 bytes) of the collectives a step issues beyond DDP's
    all-reduce: what the fitted synchronisation term scales."""
    if n <= 1 or strategy.name == "ddp":
        return 0.0
    if strategy.name == "zero1":
        return len(tensor_bytes or (0.0,)) * sharded_cost.broadcast_s(top, 0.0, n, library)
    gather = sharded_cost.all_gather_s(top, 0.0, n, library)
    scatter = sharded_cost.reduce_scatter_s(top, 0.0, n, library)
    return sum(gathers * gather + scatter for _, gathers in strategy.units)
