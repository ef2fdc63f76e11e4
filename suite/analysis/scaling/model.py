"""The scaling model: step(N, b) = compute(b) + the all-reduce time the bucket schedule exposes.

Throughput = N * b / step(N, b); efficiency = step(1, b) / step(N, b) (weak scaling: the per-worker
batch stays b). Predictions beyond the largest validated worker count are marked extrapolated.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from suite.analysis.scaling import allreduce_cost, overlap
from suite.analysis.scaling.compute import ComputeModel
from suite.analysis.scaling.topology import Topology

MIB = 2**20  # DDP's bucket_cap_mb is in MiB (bucket_bytes_cap = bucket_cap_mb * 1024 * 1024)
DEFAULT_BUCKET_MB = 25.0  # DDP's default
DEFAULT_WORKERS = [2**k for k in range(13)]  # 1 .. 4096
# Gradient bytes per parameter as DDP all-reduces them: fp32 gradients under bf16/fp16 autocast.
BYTES_PER_PARAM = {"fp32": 4, "fp64": 8, "bf16": 4, "fp16": 4}


@dataclass(frozen=True)
class Step:
    """One predicted step: its parts and the all-reduce algorithm of its largest bucket."""

    compute_s: float
    comm_s: float
    exposed_s: float
    algorithm: str

    @property
    def total_s(self) -> float:
        return self.compute_s + self.exposed_s


@dataclass(frozen=True)
class ScalingModel:
    topology: Topology
    compute: ComputeModel
    grad_bytes: float
    bucket_bytes: float = DEFAULT_BUCKET_MB * MIB
    validated_workers: tuple[int, ...] = ()

    @property
    def validated_max(self) -> int:
        """Largest worker count the model was checked against a measurement at (1: none)."""
        return max(self.validated_workers, default=1)

    def step(self, n: int, batch: int) -> Step:
        buckets = overlap.bucket_sizes(self.grad_bytes, self.bucket_bytes)
        comm, exposed = overlap.exposed_s(
            buckets,
            lambda size: allreduce_cost.allreduce(self.topology, size, n)[0],
            self.compute.backward_s(batch),
        )
        algorithm = allreduce_cost.allreduce(self.topology, max(buckets, default=0.0), n)[1]
        return Step(self.compute.step_s(batch), comm, exposed, algorithm)

    def step_s(self, n: int, batch: int) -> float:
        return self.step(n, batch).total_s

    def predict(self, workers: list[int], batch: int) -> pd.DataFrame:
        base = self.step_s(1, batch)
        rows = []
        for n in workers:
            step = self.step(n, batch)
            rows.append(
                {
                    "workers": n,
                    "nodes": self.topology.nodes(n),
                    "per_worker_batch": batch,
                    "step_time_s": step.total_s,
                    "compute_s": step.compute_s,
                    "comm_s": step.comm_s,
                    "exposed_comm_s": step.exposed_s,
                    "algorithm": step.algorithm,
                    "samples_per_s": n * batch / step.total_s,
                    "efficiency": base / step.total_s,
                    "extrapolated": n > self.validated_max,
                }
            )
        return pd.DataFrame(rows)

    def describe(self) -> dict:
        return {
            **self.topology.describe(),
            "compute_fixed_s": self.compute.fixed_s,
            "compute_per_sample_s": self.compute.per_sample_s,
            "backward_fraction": self.compute.backward_fraction,
            "grad_bytes": self.grad_bytes,
            "bucket_bytes": self.bucket_bytes,
            "validated_max_workers": self.validated_max,
        }
