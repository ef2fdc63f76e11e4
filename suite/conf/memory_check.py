"""Refuse a run whose ranks, by the estimate of `dpsuite.measure.memory_estimate`, cannot fit in
this host's available memory: before any rank starts, rather than after the host swaps."""

from __future__ import annotations

from dpsuite.conf.schema import RunConfig
from dpsuite.errors import UserError
from dpsuite.measure.memory_estimate import MemoryEstimate, estimate
from dpsuite.optim.lr_rules import RULES
from dpsuite.runtime.host_memory import human_size, mem_available, rank_footprint
from dpsuite.sync.config import CONFIGS
from dpsuite.workloads.base import Workload


def momentum_buffers(cfg: RunConfig) -> int:
    """Parameter-sized copies the run's optimizer keeps: LARS always one, SGD one with
    momentum (PyTorch's SGD keeps none without)."""
    if RULES[cfg.lr_rule.name].optimizer == "lars":
        return 1
    return 1 if cfg.optimizer.momentum > 0 else 0


def run_estimate(
    cfg: RunConfig, workload: Workload, per_worker: int, global_batch: int, processes: int
) -> MemoryEstimate:
    """The estimate for this run on this host: simulated mode is one process computing the
    whole global batch; DDP runs ``processes`` ranks of ``per_worker`` samples each, and a
    sharding strategy (``zero1``, ``fsdp``) divides what it shards among all ``workers``."""
    simulated = cfg.mode == "simulated"
    sync = CONFIGS[cfg.sync.name]
    distributed = not simulated and cfg.workers > 1
    return estimate(
        workload,
        batch=global_batch if simulated else per_worker,
        precision=cfg.precision,
        momentum_buffers=momentum_buffers(cfg),
        ranks=processes,
        ddp=distributed and sync.ddp_buckets,
        footprint=rank_footprint(),
        sharded=sync.sharded_parts if distributed else (),
        shards=cfg.workers,
    )


def describe(est: MemoryEstimate) -> str:
    """The estimate in one phrase: per rank by part, and in all."""
    parts = ", ".join(f"{k.replace('_', ' ')} {human_size(v)}" for k, v in est.parts.items() if v)
    rule = "" if est.activation_rule != "none" else "; activations not estimated"
    return (
        f"{est.ranks} rank(s) x {human_size(est.per_rank)} = {human_size(est.total)} "
        f"({est.parameters:,} parameters; per rank: {parts}{rule})"
    )


def check_memory_fits(
    cfg: RunConfig, workload: Workload, per_worker: int, global_batch: int, processes: int
) -> MemoryEstimate:
    """The run's estimate; UserError naming it and the host's memory when the run does not fit
    (unless ``checks.memory`` is false)."""
    est = run_estimate(cfg, workload, per_worker, global_batch, processes)
    available = mem_available()
    if not cfg.checks.memory or available is None or est.total <= available:
        return est
    raise UserError(
        f"this run needs about {human_size(est.total)} of memory, more than the "
        f"{human_size(available)} this host has available (MemAvailable): {describe(est)}; "
        "use fewer workers or a smaller batch or model, or checks.memory=false to start it anyway"
    )
