"""Fully sharded data parallel: parameters, gradients and optimizer state sharded across ranks.

Built on ``torch.distributed.fsdp.fully_shard`` over a one-dimensional device mesh of all ranks
(CPU with gloo, or CUDA). Each unit (``sync.wrap``) keeps 1/n of its parameters per rank,
all-gathers them before its forward (and again before its backward when
``sync.reshard_after_forward``: ZeRO-3; off, it keeps them from forward to backward: ZeRO-2),
and reduce-scatters its gradients, so each rank steps its own shard and keeps only that shard's
optimizer state. The optimizer steps the sharded parameters (DTensors) as it would whole ones.

Wrapping policy ``blocks`` (the default): every module of a repeated run of blocks, i.e. the
children of a ``ModuleList`` or ``Sequential`` holding at least two modules of one class that
have parameters (the transformer blocks of the GPTs, the residual blocks of a ResNet, the
layers of an MLP); without such a run, each top-level child with parameters. ``children``: each
top-level child with parameters. ``root``: the whole model as one unit. The root is always a
unit of its own (the parameters no other unit holds).

``sync.mixed_precision`` (GPU only, at precision bf16 or fp16): FSDP's ``MixedPrecisionPolicy``
gathers the parameters in the run's 16-bit dtype and reduce-scatters the gradients in float32;
the shards the optimizer steps stay float32.
"""

from __future__ import annotations

import copy
from typing import ClassVar

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from dpsuite.runtime.freed_memory import release_freed_memory
from dpsuite.sync.base import SyncStrategy
from dpsuite.sync.config import FSDPConfig
from dpsuite.sync.hooks import tensor_bytes


class FSDP(SyncStrategy):
    """``fully_shard`` on each unit of the wrapping policy, then on the model (``sync=fsdp``)."""

    Config = FSDPConfig
    # Its forward all-gathers: no step is free of communication.
    calibrates: ClassVar[bool] = False
    same_parameters: ClassVar[bool] = False  # each rank holds its own shards
    # No rank ever holds its whole local gradient (reduce-scattered during backward), which the
    # noise scale's per-rank method needs.
    averages_gradients: ClassVar[bool] = False

    def __init__(self, config: FSDPConfig, device: torch.device, world_size: int = 1) -> None:
        super().__init__(config, device, world_size)
        self.shell: nn.Module | None = None  # the model's structure on the meta device
        self.unit_param_bytes: list[tuple[float, int]] = []  # (bytes, all-gathers per step)
        self.gather_ratio = 1.0  # bytes all-gathered per byte of the parameters

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        """Shards ``model`` in place (its class becomes an FSDP module); returns it."""
        self.shell = meta_copy(model)
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        reshard = self.config.reshard_after_forward
        policy = MixedPrecisionPolicy()
        if self.config.mixed_precision:
            policy = mixed_precision_policy(self.precision)
            self.gather_ratio = policy.param_dtype.itemsize / next(model.parameters()).itemsize
        units = wrap_units(model, self.config.wrap)
        # Counted before sharding: fully_shard replaces the parameters it shards.
        self.unit_param_bytes = unit_gathers(model, units, reshard)
        for unit in units:
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        return model

    def fixed_step_traffic(self, net: nn.Module) -> tuple[float, int]:
        """Per unit and step: its all-gathers of the parameters and one reduce-scatter of the
        gradients, each (n-1)/n of the unit's bytes per rank (ring convention); with the
        mixed-precision policy the all-gathers move 16-bit parameters."""
        share = (self.world_size - 1) / self.world_size
        units = [(b, g) for b, g in self.unit_param_bytes if b > 0]
        sent = sum(share * b * (gathers * self.gather_ratio + 1) for b, gathers in units)
        return sent, sum(gathers + 1 for _, gathers in units)

    def eval_model(self, model: nn.Module) -> nn.Module:
        """A plain module holding the full parameters (gathered on every rank: each calls this
        at the same points); training goes on with the shards.

        Gathered one tensor at a time into the copy: the rank then holds its shards, the copy
        and one gathered tensor, not a second full copy (a whole gathered state dict). The
        memory training freed goes back to the OS first, so the copy does not come on top of
        it (`dpsuite.runtime.freed_memory`)."""
        if self.device.type == "cpu":
            release_freed_memory()
        replica = copy.deepcopy(self.shell).to_empty(device=self.device)
        targets = replica.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, value in model.state_dict().items():
                full = value.full_tensor() if isinstance(value, DTensor) else value
                targets[name].copy_(full)
                del full  # before the next gather
        return replica


# The 16-bit dtypes of the run precisions FSDP's mixed-precision policy gathers in.
GATHER_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def mixed_precision_policy(precision: str) -> MixedPrecisionPolicy:
    """FSDP's policy for a run at ``precision`` (bf16 or fp16): parameters gathered in that
    dtype for forward and backward, gradients reduce-scattered in float32."""
    if precision not in GATHER_DTYPES:
        raise ValueError(f"sync.mixed_precision needs precision=bf16 or fp16, got {precision}")
    return MixedPrecisionPolicy(param_dtype=GATHER_DTYPES[precision], reduce_dtype=torch.float32)


def has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def repeated_blocks(container: nn.Module) -> list[nn.Module]:
    """The children of a ModuleList or Sequential when at least two have parameters and those
    are all of one class; else none."""
    if not isinstance(container, nn.ModuleList | nn.Sequential):
        return []
    kids = [c for c in container.children() if has_params(c)]
    return kids if len(kids) >= 2 and len({type(c) for c in kids}) == 1 else []


def wrap_units(model: nn.Module, policy: str) -> list[nn.Module]:
    """The submodules sharded as units of their own under ``policy`` (disjoint; root aside)."""
    if policy == "root":
        return []
    units: list[nn.Module] = []
    if policy == "blocks":
        inside: set[int] = set()  # modules within a chosen block: not split further
        for module in model.modules():
            if id(module) in inside:
                continue
            for block in repeated_blocks(module):
                units.append(block)
                inside.update(id(m) for m in block.modules())
    return units or [c for c in model.children() if has_params(c)]


def unit_gathers(
    model: nn.Module, units: list[nn.Module], reshard: bool
) -> list[tuple[float, int]]:
    """(parameter bytes, all-gathers per step) of each unit in ``units``' order, then of the
    root (the parameters no unit holds), which stays gathered from its forward to its backward:
    one all-gather. A parameter two units share is the first one's."""
    owned: set[int] = set()
    out: list[tuple[float, int]] = []
    for unit in units:
        unit_params = [p for p in unit.parameters() if id(p) not in owned]
        owned.update(id(p) for p in unit_params)
        out.append((sum(map(tensor_bytes, unit_params)), 1 + int(reshard)))
    rest = [p for p in model.parameters() if id(p) not in owned]
    out.append((sum(map(tensor_bytes, rest)), 1))
    return out


def meta_copy(model: nn.Module) -> nn.Module:
    """``model``'s structure with every parameter and buffer on the meta device (no data)."""
    memo: dict[int, object] = {
        id(p): nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
        for p in model.parameters()
    }
    memo.update({id(b): torch.empty_like(b, device="meta") for b in model.buffers()})
    return copy.deepcopy(model, memo)
