"""A workload's own code (``build_model``, ``load_data``), called so that whatever it does
ends the run as failed with one line naming the workload and what happened.

Workloads may come from other packages. Their code runs contained
(``dpsuite.workloads.contained``): an exception, ``sys.exit`` or a ``KeyboardInterrupt`` of its
own becomes a ``WorkloadError``, never the end of the process or of a sweep; a ``load_data``
that does not return within ``data.load_timeout_s`` fails the run (on every rank: each loads
its own copy). The data is checked before any training (``Data.problem``,
``Datasets.problem``): an empty split, a non-finite input or a label out of range is a data
bug, not a run that ``diverged``.
"""

from __future__ import annotations

from torch import nn

from dpsuite.workloads.base import Data, Datasets, Workload
from dpsuite.workloads.contained import Escaped, call_contained


class WorkloadError(RuntimeError):
    """The workload's own code failed the run; the message names the workload and how."""


def load_data(workload: Workload, limit_s: float | None = None) -> Data | Datasets:
    """``workload.load_data()`` within ``limit_s`` seconds (None: no limit), its data checked;
    WorkloadError."""
    name = workload.config.name
    try:
        data = call_contained(workload.load_data, limit_s, "load_data")
    except Escaped as exc:
        if exc.cause is None:  # only with a limit
            raise WorkloadError(
                f"workload '{name}': load_data did not return within {limit_s:g} s "
                "(data.load_timeout_s)"
            ) from None
        raise WorkloadError(f"workload '{name}': load_data raised {exc}") from None
    if not isinstance(data, (Data, Datasets)):
        kind = type(data).__name__
        raise WorkloadError(
            f"workload '{name}': load_data returned a {kind}, not a Data (tensors) or a "
            "Datasets (torch Datasets)"
        )
    # A workload scored by accuracy classifies: its targets are labels. One scored by its
    # loss (a regression, a language model's validation loss) may have any finite targets.
    problem = data.problem(workload.classes if workload.target_metric == "eval_acc" else None)
    if problem:
        raise WorkloadError(f"workload '{name}': its data cannot be trained on: {problem}")
    return data


def build_model(workload: Workload) -> nn.Module:
    """``workload.build_model()``; WorkloadError for whatever escapes it."""
    name = workload.config.name
    try:
        model = call_contained(workload.build_model, None, "build_model")
    except Escaped as exc:
        raise WorkloadError(f"workload '{name}': build_model raised {exc}") from None
    if not isinstance(model, nn.Module):
        kind = type(model).__name__
        raise WorkloadError(f"workload '{name}': build_model returned a {kind}, not a Module")
    return model
