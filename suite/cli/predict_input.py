"""`dpsuite predict`'s input rate taken from `dpsuite input-bench` results: a node's host
cannot feed its ranks faster than its input pipeline measured alone."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from dpsuite import results
from dpsuite.analysis.scaling import options
from dpsuite.analysis.scaling.fit import Fit
from dpsuite.analysis.scaling.options import ModelOptions
from dpsuite.errors import UserError


@dataclass(frozen=True)
class MeasuredInput:
    """The input bench's best point at its largest rank count for one workload."""

    bench_id: str
    ranks: int
    loader_workers: int
    samples_per_s: float  # all the ranks on the host together
    samples_per_s_per_rank: float


def measured_input(inputs: pd.DataFrame, workload: str) -> MeasuredInput | None:
    """The rate the host gave the most ranks it was measured with, at its best loader
    workers; None when the workload's pipeline was not measured."""
    if inputs.empty:
        return None
    mine = inputs[inputs["workload"] == workload]
    if mine.empty:
        return None
    widest = mine[mine["ranks"] == mine["ranks"].max()]
    best = widest.loc[widest["samples_per_s"].idxmax()]
    return MeasuredInput(
        str(best["bench_id"]),
        int(best["ranks"]),
        int(best["loader_workers"]),
        float(best["samples_per_s"]),
        float(best["samples_per_s_per_rank"]),
    )


def check(a: argparse.Namespace) -> None:
    """``--input-rate-from`` on its own: a directory, and not with a rate given by hand."""
    if a.input_rate_from is None:
        return
    if a.input_samples_per_s is not None:
        raise UserError("give --input-samples-per-s or --input-rate-from, not both")
    if a.published:
        raise UserError("--input-rate-from goes with a prediction, not --published")
    if not Path(a.input_rate_from).is_dir():
        raise UserError(f"--input-rate-from: results directory not found: {a.input_rate_from}")


def with_input_rates(fits: list[Fit], a: argparse.Namespace, opts: ModelOptions) -> list[Fit]:
    """Each fit with its input rate: given by hand, or measured by input-bench in
    ``--input-rate-from`` (else in RESULTS_DIR, where it has any), saying which."""
    source = a.input_rate_from or a.results_dir
    if opts.input_samples_per_s is not None or source is None:
        return [options.input_rate(one, opts) for one in fits]
    inputs = results.load_input_bench(source)
    out = []
    for one in fits:
        measured = measured_input(inputs, one.workload)
        if measured is None:
            out.append(one)
            continue
        print(describe(measured, one.workload, a.batch))
        rate = replace(opts, input_samples_per_s=measured.samples_per_s)
        out.append(options.input_rate(one, rate))
    if a.input_rate_from and len(out) and all(f is g for f, g in zip(out, fits, strict=True)):
        names = ", ".join(sorted({f.workload for f in fits}))
        raise UserError(f"--input-rate-from {a.input_rate_from}: no input-bench result of {names}")
    return out


def describe(m: MeasuredInput, workload: str, batch: int) -> str:
    """The printout's line: where the rate comes from and the least step it allows."""
    least_ms = 1e3 * batch / m.samples_per_s_per_rank
    workers = f"{m.loader_workers} loader worker{'s' if m.loader_workers != 1 else ''}"
    return (
        f"# {workload}: input rate from input-bench {m.bench_id}: {m.samples_per_s:,.0f} "
        f"samples/s with {m.ranks} rank{'s' if m.ranks > 1 else ''} on the host "
        f"({workers}, {m.samples_per_s_per_rank:,.0f} per rank): a "
        f"step of {batch} samples per worker cannot be faster than {least_ms:.3g} ms"
    )
