"""What a run's `sync` config asks for, checked: the strategy and its parameters (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.errors import UserError

STRATEGIES = ("allreduce", "param_server", "local_sgd", "fp16", "bf16", "powersgd")
# The keys each strategy's yaml carries besides `name`.
PARAMETERS: dict[str, tuple[str, ...]] = {
    "allreduce": (),
    "param_server": (),
    "local_sgd": ("period", "warmup_steps"),
    "fp16": (),
    "bf16": (),
    "powersgd": ("rank", "start_iter", "min_compression_rate", "error_feedback", "warm_start"),
}


@dataclass(frozen=True)
class SyncSpec:
    """How the replicas of a run agree. Fields a strategy does not use keep their defaults."""

    name: str = "allreduce"
    period: int = 1
    warmup_steps: int = 0
    rank: int = 1
    start_iter: int = 2
    min_compression_rate: float = 2.0
    error_feedback: bool = True
    warm_start: bool = True

    @property
    def label(self) -> str:
        """A short name for plots and tables that tells configurations apart."""
        if self.name == "local_sgd":
            warm = f", warmup {self.warmup_steps}" if self.warmup_steps else ""
            return f"local_sgd (period {self.period}{warm})"
        if self.name == "powersgd":
            extra = "" if self.error_feedback else ", no error feedback"
            return f"powersgd (rank {self.rank}, from step {self.start_iter}{extra})"
        return self.name

    def params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PARAMETERS[self.name]}


def _int(value: Any, name: str, minimum: int) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise UserError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def parse(cfg: dict[str, Any], mode: str) -> SyncSpec:
    """The checked spec of a resolved ``sync`` config; UserError names the bad key."""
    name = cfg.get("name")
    if name not in STRATEGIES:
        raise UserError(f"unknown sync '{name}' (choose from: {', '.join(STRATEGIES)})")
    if mode == "simulated" and name != "allreduce":
        raise UserError(
            f"sync={name} needs real workers: mode=simulated supports only sync=allreduce"
        )
    if name == "local_sgd":
        return SyncSpec(
            name,
            period=_int(cfg.get("period"), "sync.period", 1),
            warmup_steps=_int(cfg.get("warmup_steps"), "sync.warmup_steps", 0),
        )
    if name == "powersgd":
        rate = cfg.get("min_compression_rate")
        if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0):
            raise UserError(f"sync.min_compression_rate must be a number > 0, got {rate!r}")
        flags = {}
        for key in ("error_feedback", "warm_start"):
            if not isinstance(cfg.get(key), bool):
                raise UserError(f"sync.{key} must be true or false, got {cfg.get(key)!r}")
            flags[key] = cfg[key]
        # PyTorch's rule: with error feedback or warm start, the first two iterations must be
        # plain all-reduce, because DDP rebuilds its buckets after the first one.
        least = 2 if flags["error_feedback"] or flags["warm_start"] else 1
        return SyncSpec(
            name,
            rank=_int(cfg.get("rank"), "sync.rank", 1),
            start_iter=_int(cfg.get("start_iter"), "sync.start_iter", least),
            min_compression_rate=float(rate),
            **flags,
        )
    return SyncSpec(name)
