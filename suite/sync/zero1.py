"""ZeRO stage 1: DDP's all-reduce of the gradients, the optimizer state sharded across ranks.

Built on ``torch.distributed.optim.ZeroRedundancyOptimizer``: each rank keeps the optimizer
state (momentum) of its share of the parameters only, steps that share, and broadcasts it to
the others after the step. The LR the loop sets on ``param_groups`` reaches the local optimizer
at every ``step`` (ZeroRedundancyOptimizer copies its groups' options into it).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.optim import Optimizer

from dpsuite.sync.allreduce import AllReduce
from dpsuite.sync.config import Zero1Config
from dpsuite.sync.hooks import tensor_bytes


class Zero1(AllReduce):
    """DDP with its built-in all-reduce, and a ZeroRedundancyOptimizer (``sync=zero1``)."""

    Config = Zero1Config
    # Its optimizer step broadcasts the parameters: no step is free of communication, and its
    # state is sharded (saving it for the calibration would gather it).
    calibrates: ClassVar[bool] = False
    # Each rank steps its own shard and broadcasts it: not counted on to be bit-identical.
    same_parameters: ClassVar[bool] = False

    def build_optimizer(
        self, optimizer_class: type[Optimizer], params: Any, options: dict[str, Any]
    ) -> Optimizer:
        return ZeroRedundancyOptimizer(params, optimizer_class=optimizer_class, **options)

    def fixed_step_traffic(self, net: nn.Module) -> tuple[float, int]:
        """DDP's all-reduce, and each rank's updated share broadcast to the others after the
        step: counted as an all-gather of the parameters ((n-1)/n of them per rank), one
        broadcast per parameter tensor."""
        reduce_bytes, reduce_ops = super().fixed_step_traffic(net)
        params = [p for p in net.parameters() if p.requires_grad]
        share = (self.world_size - 1) / self.world_size
        return reduce_bytes + share * sum(tensor_bytes(p) for p in params), reduce_ops + len(params)
