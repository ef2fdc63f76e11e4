"""The `sync` config group's options: each strategy's config, without the strategies (which
need torch), so that composing a config or printing help stays quick."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SyncConfig:
    """A strategy without knobs of its own."""

    name: str = "allreduce"
    """The strategy (a config group choice: `sync=NAME`)."""

    @property
    def label(self) -> str:
        """A short name for plots and tables that tells configurations apart."""
        return self.name

    def check(self, workers: int) -> None:
        """Raise ValueError naming the key when the values cannot work together."""


@dataclass
class LocalSGDConfig(SyncConfig):
    """Local SGD / periodic model averaging (post-local SGD, Lin et al. 2018)."""

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
class PowerSGDConfig(SyncConfig):
    """PowerSGD (Vogels et al. 2019): weight matrices sent as rank-r factors P and Q."""

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


# name -> config; the strategies of the same names are `dpsuite.sync.STRATEGIES`
CONFIGS: dict[str, type[SyncConfig]] = {
    "allreduce": SyncConfig,
    "param_server": SyncConfig,
    "local_sgd": LocalSGDConfig,
    "fp16": SyncConfig,
    "bf16": SyncConfig,
    "powersgd": PowerSGDConfig,
}
