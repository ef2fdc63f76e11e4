"""`dpsuite predict --sync`: the data-parallel strategy whose collectives the model's
communication term is made of (ddp's all-reduce, zero1's all-reduce and parameter broadcasts,
fsdp's all-gathers and reduce-scatters), each bad value or combination one UserError."""

from __future__ import annotations

import argparse

import pandas as pd

from dpsuite.analysis.scaling.strategy import STRATEGIES, Strategy, whole_model_unit
from dpsuite.analysis.scaling.strategy_runs import KEYS, base_key, fsdp_strategy, strategy_keys
from dpsuite.errors import UserError

SWITCH = {"true": True, "on": True, "false": False, "off": False}


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--sync",
        choices=STRATEGIES,
        help="the strategy to model: ddp (all-reduce), zero1 (all-reduce, then the parameters "
        "broadcast), fsdp (all-gathers and reduce-scatters). With RESULTS_DIR: its runs of that "
        "strategy (default: every one they recorded, each its own model); planning: default ddp",
    )
    group.add_argument(
        "--reshard-after-forward",
        choices=sorted(SWITCH),
        help="with --sync fsdp: gather each unit's parameters again for its backward pass "
        "(true, the suite's default: ZeRO-3) or keep them from forward (false: ZeRO-2)",
    )


def reshard(a: argparse.Namespace) -> bool | None:
    return None if a.reshard_after_forward is None else SWITCH[a.reshard_after_forward]


def check(a: argparse.Namespace) -> None:
    """The combinations the strategies cannot model."""
    sharded = a.sync in ("zero1", "fsdp")
    if a.reshard_after_forward is not None and a.sync != "fsdp":
        raise UserError("--reshard-after-forward goes with --sync fsdp")
    if sharded and a.library in ("horovod", "caffe2"):
        raise UserError(f"--sync {a.sync} is torch's: it does not run on --library {a.library}")
    if a.sync == "fsdp" and a.grad_dtype is not None:
        raise UserError(
            "--grad-dtype is a DDP compression hook's: --sync fsdp reduce-scatters the "
            "gradients in the parameters' dtype"
        )
    if a.sync == "fsdp" and a.grad_accum != 1:
        raise UserError("--grad-accum goes with --sync ddp or zero1 (fsdp gathers per micro-batch)")


def keys(a: argparse.Namespace) -> tuple[str, ...]:
    """The strategies (``strategy_runs.KEYS``) of RESULTS_DIR's runs to fit a model to."""
    if a.sync is None:
        return KEYS
    if a.sync != "fsdp":
        return (a.sync,)
    on = reshard(a)
    return {None: ("fsdp", "fsdp-no-reshard"), True: ("fsdp",), False: ("fsdp-no-reshard",)}[on]


def planned(a: argparse.Namespace, runs: pd.DataFrame | None, param_bytes: float) -> Strategy:
    """The strategy to plan with: fsdp's units those of ``--workload``'s model as its runs in
    RESULTS_DIR wrapped it (``sync.wrap``, ``blocks`` where they did not run fsdp), else one
    unit of every parameter."""
    if a.sync is None or a.sync == "ddp":
        return Strategy()
    if a.sync == "zero1":
        return Strategy("zero1")
    on = reshard(a)
    on = True if on is None else on
    if runs is None or a.workload is None:
        return Strategy("fsdp", on, whole_model_unit(param_bytes))
    mine = runs[runs["workload"].astype(str) == a.workload]
    bases = strategy_keys(mine).map(base_key, na_action="ignore")
    fsdp_runs = mine[bases.isin(("fsdp", "fsdp-no-reshard"))]
    return fsdp_strategy(fsdp_runs if len(fsdp_runs) else mine, on, param_bytes)
