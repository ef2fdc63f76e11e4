"""Combinations of the sync strategy with the rest of a run that cannot work, each refused in
one line before any rank starts (rather than a rank failing inside ``fully_shard``).

* ``sync=fsdp`` shards every parameter along its first dimension: a scalar parameter has none,
  and FSDP refuses non-contiguous ones, which ``step.channels_last=true`` makes of a CNN's
  convolution weights;
* ``timing.comm_hook=true`` times DDP's all-reduce from inside DDP's communication hook:
  ``sync=fsdp`` has no DDP, nothing would be timed;
* the strategy's own options that depend on the device and precision
  (``SyncConfig.check_device``: FSDP's mixed-precision policy needs a GPU and a 16-bit
  precision).
"""

from __future__ import annotations

from torch import nn

from dpsuite.conf.schema import RunConfig
from dpsuite.errors import UserError
from dpsuite.measure.meta_model import on_meta_model
from dpsuite.workloads.base import Workload


def scalar_parameter(workload: Workload) -> str | None:
    """The name of the first scalar (0-dimensional) parameter of the workload's model, built
    on the meta device; None when it has none or cannot be built here (its run then says why
    when it loads)."""
    return on_meta_model("scalar-parameter", workload, first_scalar)


def first_scalar(model: nn.Module) -> str | None:
    return next((n for n, p in model.named_parameters() if p.dim() == 0), None)


def check_sync_combination(cfg: RunConfig, workload: Workload, device: str | None) -> None:
    """UserError when the run's sync strategy cannot work with the rest of the run
    (``device``: the resolved device, None when it is checked where the run starts)."""
    sync = cfg.sync
    if device is not None:
        try:
            sync.check_device(device, cfg.precision)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    if sync.name != "fsdp" or cfg.mode != "ddp":
        return
    if cfg.step.channels_last:
        raise UserError(
            "sync=fsdp cannot shard channels_last parameters (FSDP shards contiguous "
            "parameters only): drop step.channels_last=true or pick another sync"
        )
    if cfg.timing.comm_hook:
        raise UserError(
            "timing.comm_hook=true times DDP's all-reduce, which sync=fsdp does not use: drop "
            "it (fsdp's collectives are counted in wire_bytes_per_step)"
        )
    scalar = scalar_parameter(workload)
    if scalar is not None:
        raise UserError(
            f"sync=fsdp cannot shard workload '{cfg.workload.name}': its parameter '{scalar}' is "
            "a scalar (FSDP shards each parameter along its first dimension); use sync=zero1 "
            "or allreduce, or make it a 1-element tensor"
        )
