"""A scaling model of data-parallel training that plans a cluster, checked against measurements.

step(N, b) = compute(b) + the part of the gradient all-reduces the backward pass does not hide.

* ``topology``: GPUs per node, the link inside a node and the network between nodes;
* ``allreduce_cost``: ring, tree and hierarchical all-reduce on that topology, the fastest chosen;
* ``compute``: one worker's step, measured (workers=1 runs) or from a profile (peak x MFU);
* ``overlap``: DDP's bucket schedule, which hides all-reduces behind the backward pass;
* ``model``: the step time, throughput and efficiency at any worker count;
* ``fit``: the model fitted to a results tree (comm-bench, runs) and validated against it;
* ``profiles``: hardware profiles shipped as YAML files with their sources;
* ``published``: the model against published multi-GPU scaling;
* ``output``: what `dpsuite predict` prints and writes.
"""

from suite.analysis.scaling.fit import Fit, fit_all
from suite.analysis.scaling.model import DEFAULT_WORKERS, ScalingModel

__all__ = ["DEFAULT_WORKERS", "Fit", "ScalingModel", "fit_all"]
