"""What sharding (`zero1`, `fsdp`) saves in memory per rank and costs in throughput against DDP
(`allreduce`): the table per comparison group and worker count, and its findings.

Memory per rank is split as the runs measured it (`dpsuite.measure.memory_parts`): parameters,
gradients and optimizer state a rank stores, and the rest of its peak. Shown only for groups
that hold a sharded run beside an all-reduce run at the same worker count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpsuite.analysis.report import data, render

SHARDED = ("zero1", "fsdp")
REFERENCE = "allreduce"
PARTS = {
    "param_mib_per_rank": "parameters_MiB",
    "grad_mib_per_rank": "gradients_MiB",
    "optimizer_state_mib_per_rank": "optimizer_state_MiB",
    "other_peak_mib": "rest_of_peak_MiB",
}
STATE = list(PARTS)[:3]  # what sharding divides: the model's state


def sharding_table(runs: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Medians per group (``key``), strategy and worker count of complete multi-worker DDP
    runs, for the worker counts where a sharded strategy and all-reduce both ran."""
    if not set(PARTS) <= set(runs.columns):
        return pd.DataFrame()
    ok = runs[(runs["mode"] == "ddp") & (runs["status"] == "complete") & (runs["workers"] > 1)]
    ok = ok[ok["sync"].isin((REFERENCE, *SHARDED))].dropna(subset=STATE)
    keep = [
        g
        for _, g in ok.groupby([*key, "workers"], dropna=False)
        if (g["sync"] == REFERENCE).any() and g["sync"].isin(SHARDED).any()
    ]
    if not keep:
        return pd.DataFrame()
    ok = pd.concat(keep, ignore_index=True)
    grouped = ok.groupby([*key, "sync", "sync_label", "workers"], dropna=False)
    table = grouped[[*PARTS, "samples_per_s"]].median().join(grouped.size().rename("runs"))
    table = table.reset_index()
    table["state_mib"] = table[STATE].sum(axis=1)
    table["peak_mib"] = table[list(PARTS)].sum(axis=1, min_count=4)
    table["group"] = data.series_labels(table, key, always=["workload"])
    table["order"] = [(REFERENCE, *SHARDED).index(s) for s in table["sync"]]
    return table.sort_values(["group", "workers", "order", "sync_label"]).reset_index(drop=True)


def reference_of(table: pd.DataFrame) -> pd.DataFrame:
    """Each row's all-reduce row of its group and worker count, aligned to ``table``."""
    ref = table[table["sync"] == REFERENCE].set_index(["group", "workers"])
    return ref.loc[list(zip(table["group"], table["workers"], strict=True))].reset_index()


def tables(table: pd.DataFrame) -> list[render.Table]:
    """One table per group: memory per rank by part, and throughput, against all-reduce."""
    ref = reference_of(table)
    shown = table.rename(columns=PARTS).assign(
        model_state_MiB=table["state_mib"],
        peak_per_rank_MiB=table["peak_mib"],
        peak_vs_allreduce_pct=100 * table["peak_mib"].to_numpy() / ref["peak_mib"].to_numpy(),
        throughput_vs_allreduce=table["samples_per_s"].to_numpy() / ref["samples_per_s"].to_numpy(),
    )
    cols = [
        "sync_label",
        "workers",
        "runs",
        *PARTS.values(),
        "model_state_MiB",
        "peak_per_rank_MiB",
        "peak_vs_allreduce_pct",
        "samples_per_s",
        "throughput_vs_allreduce",
    ]
    out = []
    for label, group in shown.groupby("group", sort=True):
        frame = group[cols].rename(columns={"sync_label": "sync"})
        out.append(
            render.Table(
                f"Memory per rank by sharding ({label})",
                frame.dropna(axis=1, how="all").replace({np.nan: None}).reset_index(drop=True),
                "Medians per strategy and worker count, MiB per rank (max over the ranks): the "
                "parameters, gradients and optimizer state a rank stores (its shard when "
                "sharded), and the rest of its peak (runtime, activations, gathered parameters, "
                "buffers); model state: the first three; peak: all four.",
            )
        )
    return out


def findings(table: pd.DataFrame) -> list[str]:
    """Per group and sharded strategy, at the most workers: memory and throughput vs DDP."""
    out: list[str] = []
    ref = reference_of(table)
    groups = table["group"].nunique()
    for i, row in table.iterrows():
        if (
            row["sync"] == REFERENCE
            or row["workers"] != table.loc[table["group"] == row["group"], "workers"].max()
        ):
            continue
        sentence = versus_ddp(row, ref.loc[i])
        out.append(f"{row['group']}: {sentence}" if groups > 1 else sentence)
    return out


def versus_ddp(row: pd.Series, ref: pd.Series) -> str:
    """'`fsdp (...)` holds 52 % of DDP's memory per rank at 38 % lower throughput at 2 workers'."""
    speed = row["samples_per_s"] / ref["samples_per_s"]
    change = "lower" if speed < 1 else "higher"
    state = row["state_mib"] / ref["state_mib"]
    sentence = (
        f"`{row['sync_label']}` holds {100 * state:.0f} % of DDP's model state per rank "
        f"(parameters, gradients, optimizer state: {row['state_mib']:.2f} vs "
        f"{ref['state_mib']:.2f} MiB)"
    )
    if pd.notna(row["peak_mib"]) and pd.notna(ref["peak_mib"]):
        peak = row["peak_mib"] / ref["peak_mib"]
        sentence += (
            f" and {100 * peak:.0f} % of its peak memory per rank ({row['peak_mib']:,.1f} vs "
            f"{ref['peak_mib']:,.1f} MiB)"
        )
    return (
        f"{sentence} at {100 * abs(1 - speed):.0f} % {change} throughput "
        f"({row['samples_per_s']:,.0f} vs {ref['samples_per_s']:,.0f} samples/s) "
        f"at {int(row['workers'])} workers."
    )
