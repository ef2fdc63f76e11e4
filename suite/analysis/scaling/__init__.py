"""A scaling model of data-parallel training that plans a cluster, checked against measurements.

step(N, b) = compute(b) + waiting for the slowest rank + the part of the gradient all-reduces the
backward pass does not hide (+ a measured per-step overhead).

* ``topology``: GPUs per node, the link inside a node and the network between nodes;
* ``allreduce_cost``: the all-reduce as the library does it (NCCL's tuning model, gloo's ring and
  halving-doubling, Horovod's hierarchical), the fastest the library has chosen;
* ``measured_bandwidth``: the bus bandwidth comm-bench measured per message size, which each
  all-reduce is read off where the user has it (``bandwidth_table`` prints it with its sources);
* ``compute``: one worker's step, measured (workers=1 runs) or from a profile (peak x MFU);
* ``tensors``: a workload's gradient tensors, from its runs or its model;
* ``overlap``: DDP's buckets and their schedule, which hides all-reduces behind the backward pass;
* ``model``: the step time, throughput and efficiency at any worker count, labelled bound or
  estimate;
* ``options``: `dpsuite predict`'s options about the model's terms;
* ``fit``: the model fitted to a results tree (comm-bench, runs) and validated against it;
* ``profiles``: hardware profiles shipped as YAML files with their sources;
* ``published``: the model against published multi-GPU scaling;
* ``output``: what `dpsuite predict` prints and writes.
"""

from dpsuite.analysis.scaling.fit import Fit, fit_all
from dpsuite.analysis.scaling.model import DEFAULT_WORKERS, ScalingModel

__all__ = ["DEFAULT_WORKERS", "Fit", "ScalingModel", "fit_all"]
