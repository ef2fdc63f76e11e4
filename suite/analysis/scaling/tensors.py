"""A workload's gradient tensors, in registration order: what DDP packs into its buckets.

From the run's own record where it has them (run.json ``param_numels``), else from the
workload's model built with the run's workload config (``config.workload.*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

CONFIG_PREFIX = "config.workload."


def _recorded(row: Mapping[str, Any]) -> list[int] | None:
    value = row.get("param_numels")
    if isinstance(value, list | tuple) and value:
        return [int(v) for v in value]
    return None


def _plain(value: Any) -> Any:
    """A whole number the results frame made a float (64.0) back to an int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _built(row: Mapping[str, Any]) -> list[int] | None:
    model = built_model(row)
    if model is None:
        return None
    return [p.numel() for p in model.parameters() if p.requires_grad]


def built_model(row: Mapping[str, Any]) -> Any:
    """The run's model built from its workload config (a torch module); None when this version
    cannot build it."""
    from dpsuite.workloads import get_workload

    params = {
        k[len(CONFIG_PREFIX) :]: _plain(v)
        for k, v in row.items()
        if k.startswith(CONFIG_PREFIX) and not (isinstance(v, float) and pd.isna(v))
    }
    name = params.pop("name", None) or row.get("workload")
    if not name:
        return None
    try:
        return get_workload(str(name), **params).build_model()
    except (KeyError, TypeError, ValueError, OSError):
        return None  # a workload this version does not have, or cannot build offline


def tensor_numels(runs: pd.DataFrame) -> list[int] | None:
    """Elements of each trainable parameter tensor of the runs' model (their first run's)."""
    if runs.empty:
        return None
    row = runs.iloc[0].to_dict()
    numels = _recorded(row) or _built(row)
    recorded = row.get("num_params")
    if numels and recorded is not None and pd.notna(recorded) and sum(numels) != int(recorded):
        return None  # not the model the runs trained (another version of the workload)
    return numels
