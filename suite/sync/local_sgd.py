"""Local SGD: replicas step on their own gradients and average their parameters every k steps.

Built on PyTorch's post-local-SGD pieces: ``post_localSGD_hook`` all-reduces gradients during
the warm-up steps and stops synchronizing after them (no intra-node subgroup:
``post_local_gradient_allreduce=False``), and ``PeriodicModelAverager`` averages the parameters
after the optimizer step every ``period`` steps once the warm-up is over.
"""

# No `from __future__ import annotations`: DDP inspects hook annotations at registration time.
import copy
import warnings
from typing import ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local
from torch.distributed.algorithms.model_averaging import averagers
from torch.distributed.algorithms.model_averaging import utils as averaging

from dpsuite.sync.base import SyncStrategy, ddp_wrap
from dpsuite.sync.config import LocalSGDConfig
from dpsuite.sync.counter import CommCounter, ring_wire_bytes
from dpsuite.sync.hooks import CommHook, Hook, tensor_bytes


class LocalSGD(SyncStrategy):
    """Periodic model averaging (``sync=local_sgd``, ``sync.period``, ``sync.warmup_steps``)."""

    Config = LocalSGDConfig
    averages_gradients: ClassVar[bool] = False  # replicas step on their own gradients
    same_parameters: ClassVar[bool] = False  # they differ between averagings

    def __init__(self, config: LocalSGDConfig, device: torch.device, world_size: int = 1) -> None:
        super().__init__(config, device, world_size)
        with warnings.catch_warnings():  # period 1 is allowed on purpose: it equals all-reduce
            warnings.simplefilter("ignore", UserWarning)
            self.averager = averagers.PeriodicModelAverager(
                period=config.period, warmup_steps=config.warmup_steps
            )
        self.period = config.period
        self.replicas_in_sync = True  # identical parameters on every rank after this step

    def wrap(self, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
        return ddp_wrap(model, self.device, bucket_cap_mb)

    def comm_hook(self) -> CommHook:
        state = post_local.PostLocalSGDState(
            process_group=None,
            subgroup=None,
            start_localSGD_iter=self.config.warmup_steps,
            post_local_gradient_allreduce=False,
        )
        return CommHook(state, counted_post_local_sgd(self.counter, self.world_size))

    def averages_now(self) -> bool:
        """Whether the averager's next call averages (PeriodicModelAverager's own rule)."""
        a = self.averager
        return a.step >= a.warmup_steps and (a.step - a.warmup_steps) % a.period == 0

    def after_step(self, model: nn.Module) -> None:
        warming_up = self.averager.step < self.averager.warmup_steps
        if not self.averages_now():
            self.averager.average_parameters(model.parameters())  # only counts the step
            self.replicas_in_sync = warming_up
            return
        # The averager concatenates exactly these tensors into the one buffer it all-reduces.
        sent = averaging.get_params_to_average(model.parameters())
        with self.blocking():
            self.averager.average_parameters(model.parameters())
        self.counter.add(ring_wire_bytes(sum(tensor_bytes(p) for p in sent), self.world_size))
        self.replicas_in_sync = True

    def eval_model(self, model: nn.Module) -> nn.Module:
        """Between averaging points the replicas differ: evaluate (and save) their average.

        The average goes into a copy, so evaluating does not change the training trajectory;
        this all-reduce is evaluation work and is not counted as training communication.
        """
        if self.replicas_in_sync:
            return model
        averaged = copy.deepcopy(model)
        averaging.average_parameters(iter(averaged.parameters()), dist.group.WORLD)
        return averaged


def counted_post_local_sgd(counter: CommCounter, world_size: int) -> Hook:
    """``post_localSGD_hook``, counting the buckets it all-reduces (warm-up steps only)."""

    def counted_post_local_sgd_hook(
        state: post_local.PostLocalSGDState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        if state.iter < state.start_localSGD_iter:  # the hook's own test for a global all-reduce
            counter.add(ring_wire_bytes(tensor_bytes(bucket.buffer()), world_size))
        return post_local.post_localSGD_hook(state, bucket)

    return counted_post_local_sgd_hook
