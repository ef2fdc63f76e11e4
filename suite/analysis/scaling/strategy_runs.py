"""Which strategy a run synchronised with, as the scaling model knows them, and what the model
needs of it: ``ddp`` (``sync=allreduce``), ``zero1``, and ``fsdp`` with or without
``reshard_after_forward``, per wrapping policy (each its own model: they issue different
collectives); other strategies (PowerSGD, local SGD, ...) are not modelled."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.scaling import tensors
from dpsuite.analysis.scaling.strategy import SYNC_NAMES, Strategy, Unit, whole_model_unit

# The model's key of each strategy it knows: fsdp split by its reshard setting. A key may carry
# a wrapping policy other than fsdp's default: "fsdp wrap=root".
KEYS = ("ddp", "zero1", "fsdp", "fsdp-no-reshard")
DEFAULT_WRAP = "blocks"


def base_key(key: str) -> str:
    """The KEYS entry of a key (its wrapping policy dropped)."""
    return key.split(" ")[0]


def strategy_keys(runs: pd.DataFrame) -> pd.Series:
    """Each run's key (a KEYS entry, for fsdp with ``wrap=...`` where it did not wrap the
    blocks), NaN for a strategy the model does not describe."""
    sync = runs.get("sync", pd.Series("allreduce", index=runs.index)).fillna("allreduce")
    keys = sync.astype(str).map(SYNC_NAMES)
    fsdp = keys == "fsdp"
    reshard = runs.get("config.sync.reshard_after_forward", pd.Series(True, index=runs.index))
    off = fsdp & (reshard.fillna(True).astype(str).str.lower() == "false")
    keys = keys.where(~off, "fsdp-no-reshard")
    wrap = runs.get("config.sync.wrap", pd.Series(DEFAULT_WRAP, index=runs.index))
    wrap = wrap.fillna(DEFAULT_WRAP).astype(str)
    other = fsdp & (wrap != DEFAULT_WRAP)
    return keys.where(~other, keys + " wrap=" + wrap)


def key_of(strategy: Strategy) -> str:
    if strategy.name != "fsdp":
        return strategy.name
    key = "fsdp" if strategy.reshard else "fsdp-no-reshard"
    return key if strategy.wrap == DEFAULT_WRAP else f"{key} wrap={strategy.wrap}"


def fsdp_units(runs: pd.DataFrame, reshard: bool, param_bytes: float) -> tuple[Unit, ...]:
    """FSDP's units as the runs wrapped them (their model built, ``sync.wrap`` applied as
    ``dpsuite.sync.fsdp`` applies it); one unit of every parameter when it cannot be built."""
    from dpsuite.sync.fsdp import unit_gathers, wrap_units

    row = runs.iloc[0].to_dict() if not runs.empty else {}
    model = tensors.built_model(row) if row else None
    if model is None:
        return whole_model_unit(param_bytes)
    wrap = row.get("config.sync.wrap")
    wrap = wrap if isinstance(wrap, str) and wrap else DEFAULT_WRAP
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
    base = base_key(key)
    if base in ("fsdp", "fsdp-no-reshard"):
        return fsdp_strategy(runs, base == "fsdp", param_bytes)
    return Strategy(key)


def fsdp_strategy(runs: pd.DataFrame, reshard: bool, param_bytes: float) -> Strategy:
    """fsdp as the first of ``runs`` wrapped the model, resharded or not."""
    wrap = runs["config.sync.wrap"].iloc[0] if "config.sync.wrap" in runs and len(runs) else None
    wrap = wrap if isinstance(wrap, str) and wrap else DEFAULT_WRAP
    return Strategy("fsdp", reshard, fsdp_units(runs, reshard, param_bytes), wrap)
