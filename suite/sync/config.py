"""The `sync` config group's options: the one list of strategies, by their configs.

Each config names its strategy's class by import path (``class_path``); the classes need torch
and are imported only when a run builds its strategy, so composing a config or printing help
stays quick.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

# Relative rounding error of one rounding to a 16-bit float (fp16: 11 significant bits, bf16: 8).
FP16_UNIT_ROUNDOFF = 2.0**-11
BF16_UNIT_ROUNDOFF = 2.0**-8


@dataclass
class SyncConfig:
    """A strategy without knobs of its own."""

    # The strategy's class as `module:Class`, imported when a run builds it.
    class_path: ClassVar[str] = "dpsuite.sync.base:SyncStrategy"
    # The contract test trains every strategy with these overrides, which make it synchronize
    # every step as all-reduce does, and allows its parameters to end this far from all-reduce's
    # (relative to the distance they travelled; 0: the same training, to float64 rounding).
    allreduce_overrides: ClassVar[tuple[str, ...]] = ()
    allreduce_tolerance: ClassVar[float] = 0.0
    # The parts of a rank's memory (as `dpsuite.measure.memory_estimate` names them) the
    # strategy divides among the ranks, and whether DDP's gradient buckets are kept: for the
    # up-front memory check.
    sharded_parts: ClassVar[tuple[str, ...]] = ()
    ddp_buckets: ClassVar[bool] = True

    name: str = "allreduce"
    """The strategy (a config group choice: `sync=NAME`)."""

    @property
    def label(self) -> str:
        """A short name for plots and tables that tells configurations apart."""
        return self.name

    def check(self, workers: int) -> None:
        """Raise ValueError naming the key when the values cannot work together."""

    def check_device(self, device: str, precision: str) -> None:
        """Raise ValueError naming the key when the strategy's options cannot apply on
        ``device`` (cpu, cuda, mps) at the run's ``precision``."""


@dataclass
class AllReduceConfig(SyncConfig):
    """All-reduce of the gradients after every step (DDP's own)."""

    class_path: ClassVar[str] = "dpsuite.sync.allreduce:AllReduce"
    name: str = "allreduce"


@dataclass
class ParameterServerConfig(SyncConfig):
    """Rank 0 averages the gradients the others send it, and sends the average back."""

    class_path: ClassVar[str] = "dpsuite.sync.param_server:ParameterServer"
    name: str = "param_server"


@dataclass
class LocalSGDConfig(SyncConfig):
    """Local SGD / periodic model averaging (post-local SGD, Lin et al. 2018)."""

    class_path: ClassVar[str] = "dpsuite.sync.local_sgd:LocalSGD"
    allreduce_overrides: ClassVar[tuple[str, ...]] = ("sync.period=1",)
    name: str = "local_sgd"
    period: int = field(default=4, metadata={"ge": 1})
    """Steps between model averages (1 averages after every step)."""
    warmup_steps: int = field(default=0, metadata={"ge": 0})
    """Steps of full gradient all-reduce before local steps begin."""

    @property
    def label(self) -> str:
        warm = f", warmup {self.warmup_steps}" if self.warmup_steps else ""
        return f"local_sgd (period {self.period}{warm})"


@dataclass
class FP16Config(SyncConfig):
    """Gradients all-reduced as fp16: rounded twice per step (the cast, the sum)."""

    class_path: ClassVar[str] = "dpsuite.sync.compressed:FP16Compression"
    allreduce_tolerance: ClassVar[float] = 4 * FP16_UNIT_ROUNDOFF
    name: str = "fp16"


@dataclass
class BF16Config(SyncConfig):
    """Gradients all-reduced as bf16: rounded twice per step (the cast, the sum)."""

    class_path: ClassVar[str] = "dpsuite.sync.compressed:BF16Compression"
    allreduce_tolerance: ClassVar[float] = 4 * BF16_UNIT_ROUNDOFF
    name: str = "bf16"


@dataclass
class PowerSGDConfig(SyncConfig):
    """PowerSGD (Vogels et al. 2019): weight matrices sent as rank-r factors P and Q."""

    class_path: ClassVar[str] = "dpsuite.sync.powersgd:PowerSGD"
    # Compression never starts within a test's steps: plain all-reduce throughout.
    allreduce_overrides: ClassVar[tuple[str, ...]] = ("sync.start_iter=1000000",)
    name: str = "powersgd"
    rank: int = field(default=1, metadata={"ge": 1})
    """Matrix approximation rank r."""
    start_iter: int = field(default=10, metadata={"ge": 1})
    """Plain all-reduce for the first steps (>= 2 with error feedback or warm start: DDP
    rebuilds its buckets after the first step)."""
    min_compression_rate: float = field(default=2.0, metadata={"gt": 0})
    """Compress a matrix only if (n + m) x r x this < n x m."""
    error_feedback: bool = True
    """Carry each rank's compression error into its next gradient."""
    warm_start: bool = True
    """Reuse last step's P and Q as the starting point."""

    @property
    def label(self) -> str:
        extra = "" if self.error_feedback else ", no error feedback"
        return f"powersgd (rank {self.rank}, from step {self.start_iter}{extra})"

    def check(self, workers: int) -> None:
        # PyTorch's rule: with error feedback or warm start, the first two iterations must be
        # plain all-reduce, because DDP rebuilds its buckets after the first one.
        least = 2 if self.error_feedback or self.warm_start else 1
        if self.start_iter < least:
            raise ValueError(
                f"sync.start_iter must be an integer >= {least} with error feedback or warm "
                f"start, got {self.start_iter}"
            )


@dataclass
class Zero1Config(SyncConfig):
    """ZeRO stage 1: DDP's all-reduce, optimizer state sharded across the ranks."""

    class_path: ClassVar[str] = "dpsuite.sync.zero1:Zero1"
    sharded_parts: ClassVar[tuple[str, ...]] = ("optimizer",)
    name: str = "zero1"


# FSDP's wrapping policies (`sync.wrap`): which submodules become units of their own.
FSDP_WRAPS = ("blocks", "children", "root")
MIXED_PRECISIONS = ("bf16", "fp16")  # the run precisions FSDP's mixed-precision policy follows


@dataclass
class FSDPConfig(SyncConfig):
    """Fully sharded data parallel: parameters, gradients and optimizer state sharded."""

    class_path: ClassVar[str] = "dpsuite.sync.fsdp:FSDP"
    sharded_parts: ClassVar[tuple[str, ...]] = ("parameters", "gradients", "optimizer")
    ddp_buckets: ClassVar[bool] = False  # no DDP: gradients are reduce-scattered per unit
    name: str = "fsdp"
    reshard_after_forward: bool = True
    """Free the gathered parameters after forward (ZeRO-3); false keeps them to backward
    (ZeRO-2: one all-gather per step instead of two)."""
    wrap: str = "blocks"
    """Units sharded and gathered together: blocks (every repeated block: transformer blocks,
    residual blocks; else the top-level children), children (the top-level children), root
    (the whole model as one unit)."""
    mixed_precision: bool = False
    """On a GPU at precision=bf16 or fp16: gather the parameters in that dtype for forward and
    backward, reduce-scatter the gradients in float32 (FSDP's MixedPrecisionPolicy); the
    shards and the optimizer stay in float32."""

    @property
    def label(self) -> str:
        stage = "ZeRO-3" if self.reshard_after_forward else "ZeRO-2"
        mixed = ", mixed precision" if self.mixed_precision else ""
        return f"fsdp ({stage}, wrap {self.wrap}{mixed})"

    def check(self, workers: int) -> None:
        if self.wrap not in FSDP_WRAPS:
            raise ValueError(f"sync.wrap must be one of {', '.join(FSDP_WRAPS)}, got '{self.wrap}'")

    def check_device(self, device: str, precision: str) -> None:
        if not self.mixed_precision:
            return
        if device != "cuda":
            raise ValueError(
                f"sync.mixed_precision=true needs device=cuda (FSDP's mixed-precision policy "
                f"casts what it gathers on a GPU; this run is on {device}: use precision=bf16 "
                "without it)"
            )
        if precision not in MIXED_PRECISIONS:
            raise ValueError(
                f"sync.mixed_precision=true needs precision=bf16 or fp16 (the dtype it gathers "
                f"the parameters in), got precision={precision}"
            )


# name -> config, in the order of the reports (`sync_order`; a new strategy: its line here)
CONFIGS: dict[str, type[SyncConfig]] = {
    c.name: c
    for c in (
        AllReduceConfig,
        ParameterServerConfig,
        LocalSGDConfig,
        FP16Config,
        BF16Config,
        PowerSGDConfig,
        Zero1Config,
        FSDPConfig,
    )
}
