"""The interface the training loop calls on a synchronization strategy, and the shared pieces.

A strategy is its config (a dataclass: the `sync` config group option of the same name) and a
class. Per step the loop does::

    loss = forward_backward(net)        # DDP (or FSDP) runs the strategy's hook in backward
    strategy.sync_gradients(model)      # gradient exchange outside DDP (parameter server)
    optimizer.step()
    strategy.after_step(model)          # parameter exchange after the step (model averaging)
    strategy.counter.end_step()         # file this step's bytes, operations, waiting time
                                        # (where the strategy files traffic step by step)

The model is wrapped (``wrap``) before the optimizer is built (``build_optimizer``), so that a
strategy can shard either. Adding a strategy: its class in a module of its own, and its config
(naming the class) with its line in the list in `dpsuite.sync.config`.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import Optimizer

from dpsuite.runtime.host import wait_for_device
from dpsuite.sync.config import SyncConfig
from dpsuite.sync.counter import CommCounter
from dpsuite.sync.hooks import CommHook


def ddp_wrap(model: nn.Module, device: torch.device, bucket_cap_mb: float) -> DDP:
    return DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=bucket_cap_mb,
    )


class SyncStrategy:
    """Base class of the strategies; on its own, no communication (a run with one worker)."""

    name: ClassVar[str] = "none"  # its config's `name` (set from `Config`)
    Config: ClassVar[type[SyncConfig]] = SyncConfig
    # Rank whose traffic is a server's rather than a worker's (parameter server only).
    server_rank: int | None = None
    # Steps between the strategy's exchanges: step-time medians are taken over such windows.
    period: int = 1
    # Whether the synchronized gradient is the workers' average (the noise scale needs it).
    averages_gradients: ClassVar[bool] = True
    # Whether its steps can be timed with communication switched off (the calibration of
    # exposed communication); sharded strategies cannot step without their collectives.
    calibrates: ClassVar[bool] = True
    # Whether every rank holds the same whole parameters after every step (the training
    # loop's divergence check then reads them instead of making the ranks meet).
    same_parameters: ClassVar[bool] = True
    # Whether its communication is counted, step by step, in ``counter`` (its hooks, exchanges
    # outside DDP). False: all of it is ``fixed_step_traffic``, the same every step, and no
    # step needs filing (the probes then leave a step alone unless they sample it).
    files_traffic: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "Config" in vars(cls):
            cls.name = cls.Config.name

    def __init__(self, config: SyncConfig, device: torch.device, world_size: int = 1) -> None:
        self.config = config
        self.device = device
        self.world_size = world_size
        self.precision = "fp32"  # the run's precision (set by `registry.build`)
        self.counter = CommCounter(files_steps=self.files_traffic)

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        """The module the loop runs forward and backward through."""
        return model

    def build_optimizer(
        self, optimizer_class: type[Optimizer], params: Any, options: dict[str, Any]
    ) -> Optimizer:
        """The optimizer over the wrapped model's ``params`` (built after ``wrap``); the loop
        sets the LR on its ``param_groups`` every step."""
        return optimizer_class(params, **options)

    def comm_hook(self) -> CommHook | None:
        """The DDP communication hook to register on the wrapped model (None: DDP's built-in
        all-reduce, in C++)."""
        return None

    def fixed_step_traffic(self, net: nn.Module) -> tuple[float, int]:
        """(bytes sent, collectives) every step adds without passing through the counter: DDP's
        built-in all-reduce of every bucket. Called once, after training."""
        return 0.0, 0

    def sync_gradients(self, model: nn.Module) -> None:
        """Called after backward, before the optimizer step."""

    def after_step(self, model: nn.Module) -> None:
        """Called after the optimizer step."""

    def eval_model(self, model: nn.Module) -> nn.Module:
        """The model to evaluate and save; called on every rank at the same points."""
        return model

    def blocking(self) -> BlockingTimer:
        """Time communication this strategy waits for outside DDP's hooks."""
        return BlockingTimer(self.counter, self.device)


class BlockingTimer:
    """Context manager: adds the synchronized wall time of its block to the counter."""

    def __init__(self, counter: CommCounter, device: torch.device) -> None:
        self.counter, self.device = counter, device

    def __enter__(self) -> BlockingTimer:
        wait_for_device(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        wait_for_device(self.device)
        self.counter.add_blocking(time.perf_counter() - self._t0)
