"""What a rank's memory holds: its parameters, gradients and optimizer state, by storage.

Each part is the bytes of the tensors this rank stores: for a sharded tensor (FSDP's DTensors)
its local shard, for a sharded optimizer (ZeroRedundancyOptimizer) the state of its own share
(a tensor reached twice, or a view of one already counted, counts once). Measured after the
first optimizer steps, while the gradients are still held; the rest of the peak resident set
(the runtime, activations, gathered parameters, communication buffers, data) is
``other_peak_mib``: of the peak resident set on CPU, of the peak CUDA allocation on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from dpsuite.measure.memory import _status_kib
from dpsuite.measure.probes import Probe
from dpsuite.runtime import distributed

MEASURED_STEPS = 2  # the state exists from the first step on; the second confirms its size


def local(tensor: Tensor) -> Tensor:
    """The part of ``tensor`` this rank stores (a DTensor's shard)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def stored_bytes(tensors: Iterable[Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = local(t).untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> Iterator[Tensor]:
    """The tensors of the optimizer's state, and of the local optimizer a sharding wrapper
    (ZeroRedundancyOptimizer) steps its own share with."""
    for opt in (optimizer, getattr(optimizer, "optim", None)):
        if opt is None:
            continue
        for state in opt.state.values():
            yield from (v for v in state.values() if isinstance(v, Tensor) and v.numel() > 1)


class MemoryPartsProbe(Probe):
    """Parameters, gradients and optimizer state a rank stores (max across ranks), and the
    rest of its peak resident set."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.parts = [0.0, 0.0, 0.0]  # params, grads, optimizer state: the largest seen

    def next_due(self, step: int) -> int | None:
        return step if step < MEASURED_STEPS else None

    def on_step_end(self, step: int) -> None:
        params = list(self.model.parameters())
        now = [
            stored_bytes(params),
            stored_bytes(p.grad for p in params if p.grad is not None),
            stored_bytes(optimizer_tensors(self.optimizer)),
        ]
        self.parts = [max(a, b) for a, b in zip(self.parts, now, strict=True)]

    def peak_bytes(self) -> float | None:
        """The peak the parts live in: CUDA memory allocated on a GPU, else the resident set."""
        if self.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(self.device))
        rss_kib = _status_kib("VmHWM")
        return None if rss_kib is None else rss_kib * 1024

    def metrics(self) -> dict[str, Any]:
        peak = self.peak_bytes()
        rest = (peak or 0.0) - sum(self.parts)
        mib = [b / 2**20 for b in distributed.max_across_ranks([*self.parts, rest], self.device)]
        return {
            "param_mib_per_rank": mib[0],
            "grad_mib_per_rank": mib[1],
            "optimizer_state_mib_per_rank": mib[2],
            "other_peak_mib": mib[3] if peak is not None else None,
        }
