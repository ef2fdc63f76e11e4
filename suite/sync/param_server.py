"""A central parameter server built from point-to-point sends and receives.

Rank 0 is the server and also trains on its own shard. Every step each other rank sends its
flattened gradients to the server; the server adds them in rank order, divides by the number
of ranks and sends the average back; every rank then takes the same optimizer step. The server
sends N-1 gradient-sized messages per step (and receives as many), a worker sends one:
this is counted as bytes sent, as for every strategy.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist
from torch import nn

from dpsuite.sync.base import SyncStrategy
from dpsuite.sync.config import ParameterServerConfig
from dpsuite.sync.hooks import tensor_bytes


class ParameterServer(SyncStrategy):
    """``sync=param_server``: no DDP; gradients go through rank 0."""

    Config = ParameterServerConfig
    server_rank = 0
    # The workers' copies come point to point from the server: the check still meets.
    same_parameters: ClassVar[bool] = False

    def sync_gradients(self, model: nn.Module) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        with self.blocking():
            if dist.get_rank() == self.server_rank:
                flat = self.serve(flat)
            else:
                self.push_pull(flat)
        offset = 0
        for p in params:
            average = flat[offset : offset + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = average.clone()
            else:
                p.grad.copy_(average)
            offset += p.numel()

    def serve(self, own: torch.Tensor) -> torch.Tensor:
        """Receive every worker's gradients, average with our own, send the average back."""
        workers = [r for r in range(dist.get_world_size()) if r != self.server_rank]
        inbox = {r: torch.empty_like(own) for r in workers}
        for request in [dist.irecv(inbox[r], src=r) for r in workers]:
            request.wait()
        total = own.clone()
        for r in workers:  # a fixed order, so every run adds the same way
            total += inbox[r]
        total /= len(workers) + 1
        for request in [dist.isend(total, dst=r) for r in workers]:
            request.wait()
        # Sent: the average, to every worker (what it received is the workers' sent bytes).
        self.counter.add(len(workers) * tensor_bytes(own), ops=2 * len(workers))
        return total

    def push_pull(self, flat: torch.Tensor) -> None:
        """Send our gradients to the server and receive the average in their place."""
        dist.send(flat, dst=self.server_rank)
        dist.recv(flat, src=self.server_rank)
        self.counter.add(tensor_bytes(flat), ops=2)  # sent: its gradients
