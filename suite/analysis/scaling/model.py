"""The scaling model: step(N, b) = compute(b) + waiting for the slowest of N + the all-reduce time
the bucket schedule exposes + the backward pass slowed by the SMs NCCL's kernels hold while they
overlap it (where the GPU's SMs and NCCL's channels are known) (+ a measured per-step overhead,
where a node's efficiency was measured). With a measured input rate (samples a node's host loads
per second) a step takes at least the time the node's ranks wait for their batches: a node's
throughput is the lesser of what compute and communication allow and that rate.

Throughput = N * b / step(N, b); efficiency = step(N0, b) / step(N, b) against a baseline of N0
workers (weak scaling: the per-worker batch stays b). Predictions beyond the largest validated
worker count are marked extrapolated.

Every prediction says what it is. Communication alone (nothing measured of what else slows a
step: stragglers, the input pipeline; NCCL's share of the SMs is the one modelled) is an upper
**bound** on efficiency; with a measured straggler distribution or a measured node efficiency it
is an **estimate**, and ``measured`` names the terms that were measured. A measured input rate
keeps a bound a bound (loading taken to overlap compute wholly), one that says where it is
input-bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import pandas as pd

from dpsuite.analysis.scaling import allreduce_cost, fsdp_schedule, overlap, sharded_cost
from dpsuite.analysis.scaling.allreduce_cost import Library
from dpsuite.analysis.scaling.compute import ComputeModel
from dpsuite.analysis.scaling.measured_bandwidth import MeasuredBandwidth, Reading
from dpsuite.analysis.scaling.strategy import Comm, Strategy, zero1_comm
from dpsuite.analysis.scaling.sync_cost import SyncCost, collective_latency_s
from dpsuite.analysis.scaling.topology import Topology

MIB = 2**20  # DDP's bucket_cap_mb is in MiB (bucket_bytes_cap = bucket_cap_mb * 1024 * 1024)
DEFAULT_BUCKET_MB = 25.0  # DDP's default
DEFAULT_WORKERS = [2**k for k in range(13)]  # 1 .. 4096
# Gradient bytes per parameter as DDP all-reduces them: fp32 gradients under bf16/fp16 autocast.
BYTES_PER_PARAM = {"fp32": 4, "fp64": 8, "bf16": 4, "fp16": 4}
# Bytes of one gradient element on the wire (--grad-dtype): bf16/fp16 with a compression hook.
GRAD_DTYPE_BYTES = {"fp32": 4, "fp64": 8, "bf16": 2, "fp16": 2}


def expected_max_factor(samples: np.ndarray, n: int) -> float:
    """E[max of n draws] / E[one draw] of the empirical distribution ``samples``.

    With the samples sorted, the k-th smallest is the maximum of n draws with probability
    (k/s)^n - ((k-1)/s)^n.
    """
    x = np.sort(np.asarray(samples, float))
    s = len(x)
    k = np.arange(1, s + 1)
    weights = (k / s) ** n - ((k - 1) / s) ** n
    return float(weights @ x / x.mean())


@dataclass(frozen=True)
class Overheads:
    """What slows a step beyond compute and communication, as measured.

    ``step_samples``: one worker's measured step times (any unit: only their spread counts),
    whose expected maximum over N ranks is what synchronous SGD waits for. ``node_efficiency``
    at ``node_workers``: a measured single-node efficiency; what it loses beyond the model's
    terms is a per-step overhead carried to every larger worker count.
    """

    step_samples: tuple[float, ...] = ()
    node_efficiency: float | None = None
    node_workers: int | None = None
    sync: SyncCost = field(default_factory=SyncCost)  # fitted to several measured counts

    def straggler_factor(self, n: int) -> float:
        if n <= 1 or len(self.step_samples) < 2:
            return 1.0
        return expected_max_factor(np.array(self.step_samples), n)


@dataclass(frozen=True)
class Step:
    """One predicted step: its parts and the all-reduce algorithm of its largest bucket."""

    compute_s: float
    wait_s: float
    comm_s: float
    exposed_s: float
    overhead_s: float
    algorithm: str
    slowed_s: float = 0.0  # the backward pass's extra time on the SMs NCCL's kernels leave it
    input_wait_s: float = 0.0  # the further wait for the node's input pipeline (0: not bound)
    sync_s: float = 0.0  # synchronisation per collective, fitted to measured counts (sync_cost)

    @property
    def total_s(self) -> float:
        return (
            self.compute_s
            + self.wait_s
            + self.slowed_s
            + self.exposed_s
            + self.overhead_s
            + self.input_wait_s
            + self.sync_s
        )


@dataclass(frozen=True)
class ScalingModel:
    topology: Topology
    compute: ComputeModel
    grad_bytes: float
    bucket_bytes: float = DEFAULT_BUCKET_MB * MIB
    validated_workers: tuple[int, ...] = ()
    library: Library = field(default_factory=Library)
    # Gradient bytes of each parameter tensor in registration order (empty: not known, the
    # gradient is cut into equal buckets).
    tensor_bytes: tuple[float, ...] = ()
    # Backward work (e.g. FLOPs) of each tensor's layer, same order (empty: by bytes).
    tensor_work: tuple[float, ...] = ()
    overheads: Overheads = field(default_factory=Overheads)
    measured: tuple[str, ...] = ()  # which terms come from a measurement (compute, links, ...)
    grad_element_bytes: float = 4.0  # bytes of one gradient element on the wire
    # Fraction of the GPU's SMs an all-reduce holds while it runs: NCCL's channels / SMs (0: not
    # known, or not NCCL).
    comm_sm_share: float = 0.0
    # Samples per second one node's host loads (decode, augment), measured (None: not known).
    input_samples_per_s: float | None = None
    # Micro-batches per step (gradient accumulation): each a forward and backward pass of the
    # per-worker batch, the gradients all-reduced once, during the last one's backward pass.
    grad_accum: int = 1
    # False: the all-reduces start when the backward pass has ended (no bucket overlaps it).
    overlap: bool = True
    # How the replicas agree (ddp, zero1, fsdp): the collectives a step issues (`strategy`).
    strategy: Strategy = field(default_factory=Strategy)
    # Bus bandwidth per message size as comm-bench measured it (None: the links' alpha-beta).
    bandwidth: MeasuredBandwidth | None = None

    @property
    def validated_max(self) -> int:
        """Largest worker count the model was checked against a measurement at (1: none)."""
        return max(self.validated_workers, default=1)

    def buckets(self) -> list[overlap.Bucket]:
        """(bytes, backward fraction done when ready) of each bucket, in all-reduce order (none
        under fsdp: it reduce-scatters per unit, without DDP)."""
        if self.strategy.name == "fsdp":
            return []
        if not self.overlap:  # every bucket waits for the end of the backward pass
            return [(size, 1.0) for size, _ in self._packed()]
        return self._packed()

    def _packed(self) -> list[overlap.Bucket]:
        if self.tensor_bytes:
            # DDP's small first bucket; Horovod's fusion buffer and Caffe2 have none.
            ddp = self.library.library == "torch-ddp"
            first = overlap.FIRST_BUCKET_BYTES if ddp else self.bucket_bytes
            work = list(self.tensor_work) or None
            return overlap.ddp_buckets(list(self.tensor_bytes), self.bucket_bytes, first, work)
        return overlap.even_buckets(self.grad_bytes, self.bucket_bytes)

    def _base_step(self, n: int, batch: int) -> Step:
        """Compute, waiting and exposed all-reduce: the terms the model derives itself."""
        buckets = self.buckets()
        sched = overlap.schedule(
            buckets,
            lambda size: self.allreduce_s(size, n),
            self.compute.backward_s(batch),
            self.comm_sm_share if n > 1 else 0.0,
        )
        largest = max((size for size, _ in buckets), default=0.0)
        algorithm = allreduce_cost.allreduce(self.topology, largest, n, self.library)[1]
        if self.strategy.name == "fsdp":
            algorithm = "ring" if n > 1 else "none"  # its all-gathers and reduce-scatters
        elif n > 1 and self.reading(largest, n) is not None:
            algorithm = f"{algorithm} (measured)"  # its time read off comm-bench's bandwidth
        # Earlier micro-batches run before the last one's backward pass, the only one overlapped.
        compute = self.grad_accum * self.compute.step_s(batch)
        wait = compute * (self.overheads.straggler_factor(n) - 1)
        extra = self.sharded_comm(n, batch)
        comm, exposed = sched.comm_s + extra.comm_s, sched.exposed_s + extra.exposed_s
        return Step(compute, wait, comm, exposed, 0.0, algorithm, sched.slowed_s)

    def sharded_comm(self, n: int, batch: int) -> Comm:
        """The collectives of zero1 and fsdp beyond DDP's all-reduce, and their exposed part."""
        s, top, lib = self.strategy, self.topology, self.library
        if n <= 1 or s.name == "ddp":
            return Comm()
        if s.name == "zero1":
            return zero1_comm(top, self.tensor_bytes, self.grad_bytes, n, lib)
        gather = partial(sharded_cost.all_gather_s, top, n=n, library=lib)
        scatter = partial(sharded_cost.reduce_scatter_s, top, n=n, library=lib)
        if lib.backend == "gloo" or not self.overlap:
            return fsdp_schedule.serial(s.units, gather, scatter)
        backward = self.compute.backward_s(batch)
        forward = self.compute.step_s(batch) - backward
        return fsdp_schedule.overlapped(s.units, gather, scatter, forward, backward)

    def reading(self, size: float, n: int) -> Reading | None:
        """The measured bus bandwidth an all-reduce of ``size`` bytes on ``n`` ranks is read
        off, None where comm-bench did not measure its scope (one node, or across nodes)."""
        curve = self.bandwidth.curve(self.topology.nodes(n), n) if self.bandwidth else None
        return curve.at(size) if curve is not None else None

    def allreduce_s(self, size: float, n: int) -> float:
        """Seconds of one all-reduce of ``size`` bytes on ``n`` ranks: from the bus bandwidth
        comm-bench measured at that size where it measured the scope, else the links' model.

        Measured at w ranks, ``t_w = 2(w-1)/w * size / busbw``; at n ranks its latency part (the
        links' model at w) is replaced by that at n and the rest scaled by the bytes a ring
        moves per rank, (n-1)/n over (w-1)/w: at n = w the measurement itself."""
        if n <= 1:
            return 0.0
        reading = self.reading(size, n)
        if reading is None:
            return allreduce_cost.allreduce(self.topology, size, n, self.library)[0]
        w = self.bandwidth.curve(self.topology.nodes(n), n).world_size
        measured = 2 * (w - 1) / w * size / reading.busbw_Bps
        if n == w:
            return measured
        latency = allreduce_cost.latency_s(self.topology, size, w, self.library)
        scale = ((n - 1) / n) / ((w - 1) / w)
        return scale * max(0.0, measured - latency) + allreduce_cost.latency_s(
            self.topology, size, n, self.library
        )

    def overhead_s(self, n: int, batch: int) -> float:
        """The per-step time a measured node efficiency loses beyond the model's own terms,
        for worker counts at or above the node's."""
        o = self.overheads
        if o.node_efficiency is None or o.node_workers is None or n < o.node_workers:
            return 0.0
        measured_step = self._base_step(1, batch).total_s / o.node_efficiency
        return max(0.0, measured_step - self._base_step(o.node_workers, batch).total_s)

    def input_step_s(self, n: int, batch: int) -> float:
        """The least step time the input rate allows: the fullest node's ranks' batches at the
        measured per-node rate (0: no rate)."""
        if self.input_samples_per_s is None:
            return 0.0
        samples = self.grad_accum * batch
        return self.topology.ranks_per_node(n) * samples / self.input_samples_per_s

    def step(self, n: int, batch: int) -> Step:
        base = self._base_step(n, batch)
        fitted = self.overheads.sync.fitted_on and n > 1
        sync = self.overheads.sync.seconds(n, collective_latency_s(self, n) if fitted else 0.0)
        step = Step(**{**base.__dict__, "overhead_s": self.overhead_s(n, batch), "sync_s": sync})
        waiting = max(0.0, self.input_step_s(n, batch) - step.total_s)
        return replace(step, input_wait_s=waiting)

    def step_s(self, n: int, batch: int) -> float:
        return self.step(n, batch).total_s

    def kind(self) -> str:
        """'estimate' when an overhead term was measured, else 'bound' (efficiency at most)."""
        o = self.overheads
        measured = o.node_efficiency is not None or o.step_samples or o.sync.fitted_on
        return "estimate" if measured else "bound"

    def terms(self) -> str:
        return ", ".join(self.measured) if self.measured else "none"

    def efficiency(self, n: int, batch: int, baseline: int = 1) -> float:
        return self.step_s(baseline, batch) / self.step_s(n, batch)

    def predict(self, workers: list[int], batch: int, baseline: int = 1) -> pd.DataFrame:
        base = self.step_s(baseline, batch)
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
                    "straggler_wait_s": step.wait_s,
                    "comm_sm_slowdown_s": step.slowed_s,
                    "comm_s": step.comm_s,
                    "exposed_comm_s": step.exposed_s,
                    "overhead_s": step.overhead_s,
                    "sync_s": step.sync_s,
                    "input_wait_s": step.input_wait_s,
                    "input_bound": step.input_wait_s > 0,
                    "algorithm": step.algorithm,
                    "samples_per_s": n * batch * self.grad_accum / step.total_s,
                    "baseline_workers": baseline,
                    "efficiency": base / step.total_s,
                    "prediction": self.kind(),
                    "measured_terms": self.terms(),
                    "extrapolated": n > self.validated_max,
                }
            )
        return pd.DataFrame(rows)

    def describe(self) -> dict:
        o = self.overheads
        return {
            **self.topology.describe(),
            "library": self.library.describe(),
            "algorithms": " ".join(self.library.algorithms()),
            "compute_fixed_s": self.compute.fixed_s,
            "compute_per_sample_s": self.compute.per_sample_s,
            "backward_fraction": self.compute.backward_fraction,
            "comm_sm_share": self.comm_sm_share,
            "grad_bytes": self.grad_bytes,
            "bucket_bytes": self.bucket_bytes,
            "buckets": len(self.buckets()),
            "grad_accum": self.grad_accum,
            "overlap": self.overlap,
            "strategy": self.strategy.label(),
            "tensors": len(self.tensor_bytes) or None,
            "step_samples": len(o.step_samples),
            "node_efficiency": o.node_efficiency,
            "node_workers": o.node_workers,
            "input_samples_per_s": self.input_samples_per_s,
            "bandwidth_per_size": ", ".join(self.bandwidth.scopes()) if self.bandwidth else None,
            "prediction": self.kind(),
            "measured_terms": self.terms(),
            "validated_max_workers": self.validated_max,
        }
