"""The sharding part of the Synchronization strategies topic: memory per rank by part and
throughput of `zero1` and `fsdp` against DDP, and the finding that sums them up."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.report import sharding_memory

KEY = ["machine", "workload", "per_worker_batch"]


def runs(rows: list[tuple]) -> pd.DataFrame:
    """Complete DDP runs of one group: (sync, label, workers, params, grads, state, other, s/s)."""
    columns = [
        "sync",
        "sync_label",
        "workers",
        "param_mib_per_rank",
        "grad_mib_per_rank",
        "optimizer_state_mib_per_rank",
        "other_peak_mib",
        "samples_per_s",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.assign(
        machine="m", workload="gpt2", per_worker_batch=8, mode="ddp", status="complete"
    )


DDP_AND_SHARDED = runs(
    [
        ("allreduce", "allreduce", 2, 40.0, 40.0, 40.0, 380.0, 1000.0),
        ("zero1", "zero1", 2, 40.0, 40.0, 20.0, 380.0, 900.0),
        ("fsdp", "fsdp (ZeRO-3, wrap blocks)", 2, 20.0, 20.0, 20.0, 200.0, 620.0),
        ("allreduce", "allreduce", 1, 40.0, 40.0, 40.0, 380.0, 600.0),  # one worker: not shown
        ("powersgd", "powersgd", 2, 40.0, 40.0, 40.0, 380.0, 1100.0),  # not a sharding strategy
    ]
)


def test_the_table_holds_ddp_and_the_sharded_strategies_at_the_shared_worker_counts():
    table = sharding_memory.sharding_table(DDP_AND_SHARDED, KEY)
    assert list(table["sync"]) == ["allreduce", "zero1", "fsdp"]
    assert list(table["state_mib"]) == [120.0, 100.0, 60.0]
    assert list(table["peak_mib"]) == [500.0, 480.0, 260.0]
    (shown,) = sharding_memory.tables(table)
    assert list(shown.frame["peak_vs_allreduce_pct"]) == [100.0, 96.0, 52.0]
    assert list(shown.frame["throughput_vs_allreduce"]) == [1.0, 0.9, 0.62]


def test_the_finding_gives_memory_and_throughput_against_ddp():
    found = sharding_memory.findings(sharding_memory.sharding_table(DDP_AND_SHARDED, KEY))
    assert found == [
        "`zero1` holds 83 % of DDP's model state per rank (parameters, gradients, optimizer "
        "state: 100.00 vs 120.00 MiB) and 96 % of its peak memory per rank (480.0 vs 500.0 MiB) "
        "at 10 % lower throughput (900 vs 1,000 samples/s) at 2 workers.",
        "`fsdp (ZeRO-3, wrap blocks)` holds 50 % of DDP's model state per rank (parameters, "
        "gradients, optimizer state: 60.00 vs 120.00 MiB) and 52 % of its peak memory per rank "
        "(260.0 vs 500.0 MiB) at 38 % lower throughput (620 vs 1,000 samples/s) at 2 workers.",
    ]


def test_nothing_without_a_sharded_run_beside_ddp():
    only_ddp = DDP_AND_SHARDED[~DDP_AND_SHARDED["sync"].isin(["zero1", "fsdp"])]
    assert sharding_memory.sharding_table(only_ddp, KEY).empty
    no_ddp = DDP_AND_SHARDED[DDP_AND_SHARDED["sync"] != "allreduce"]
    assert sharding_memory.sharding_table(no_ddp, KEY).empty
    older = DDP_AND_SHARDED.drop(columns=["other_peak_mib"])  # results before the metrics
    assert sharding_memory.sharding_table(older, KEY).empty
