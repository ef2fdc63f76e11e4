"""Which strategy a run synchronised with, as the scaling model knows them, and what the model
needs of it: ``ddp`` (``sync=allreduce``), ``zero1``, and ``fsdp`` with or without
``reshard_after_forward`` (each its own model: they issue different collectives); other
strategies (PowerSGD, local SGD, ...) are not modelled."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.scaling import tensors
from dpsuite.analysis.scaling.strategy import SYNC_NAMES, Strategy, Unit, whole_model_unit

# The model's key of each strategy it knows: fsdp split by its reshard setting.
KEYS = ("ddp", "zero1", "fsdp", "fsdp-no-reshard")


def strategy_keys(runs: pd.DataFrame) -> pd.Series:
    """Each run's key (KEYS), NaN for a strategy the model does not describe."""
    sync = runs.get("sync", pd.Series("allreduce", index=runs.index)).fillna("allreduce")
    keys = sync.astype(str).map(SYNC_NAMES)
    reshard = runs.get("config.sync.reshard_after_forward", pd.Series(True, index=runs.index))
    off = (keys == "fsdp") & (reshard.fillna(True).astype(str).str.lower() == "false")
    return keys.where(~off, "fsdp-no-reshard")


def key_of(strategy: Strategy) -> str:
    if strategy.name == "fsdp" and not strategy.reshard:
        return "fsdp-no-reshard"
    return strategy.name


def fsdp_units(runs: pd.DataFrame, reshard: bool, param_bytes: float) -> tuple[Unit, ...]:
    """FSDP's units as the runs wrapped them (their model built, ``sync.wrap`` applied as
    ``dpsuite.sync.fsdp`` applies it); one unit of every parameter when it cannot be built."""
    from dpsuite.sync.fsdp import unit_gathers, wrap_units

    row = runs.iloc[0].to_dict() if not runs.empty else {}
    model = tensors.built_model(row) if row else None
    if model is None:
        return whole_model_unit(param_bytes)
    wrap = row.get("config.sync.wrap")
    wrap = wrap if isinstance(wrap, str) and wrap else "blocks"
    recorded = row.get("num_params")
    numel = sum(p.numel() for p in model.parameters())
    if recorded is not None and pd.notna(recorded) and numel != int(recorded):
        return whole_model_unit(param_bytes)  # not the model the runs trained
    units = unit_gathers(model, wrap_units(model, wrap), reshard)
    scale = param_bytes / (sum(size for size, _ in units) or 1.0)  # the runs' precision
    # A unit without parameters (the root, when the blocks hold them all) gathers nothing.
    return tuple((float(size) * scale, int(gathers)) for size, gathers in units if size > 0)


def strategy_of(key: str, runs: pd.DataFrame, param_bytes: float) -> Strategy:
    """The model's strategy for runs of ``key``."""
    if key in ("fsdp", "fsdp-no-reshard"):
        reshard = key == "fsdp"
        return Strategy("fsdp", reshard, fsdp_units(runs, reshard, param_bytes))
    return Strategy(key)
