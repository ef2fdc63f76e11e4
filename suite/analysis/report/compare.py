"""`dpsuite compare`: several results trees side by side, grouped by machine.

A machine is a run's `hardware.tag`, or its host and hardware fingerprint when untagged, so two
directories from one machine merge and one directory holding two machines splits. The first
directory's machine is the baseline A; every other machine B is compared with it as B ÷ A, the
way a benchmark run is compared with a saved one, so that ``--fail-below`` can gate a regression.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from suite import results
from suite.analysis.report import data, findings, plots, render, stats
from suite.analysis.report.build import (
    FigureWriter,
    Written,
    display_path,
    machines_lines,
    plural,
    prepare_out,
)
from suite.errors import UserError
from suite.results import owned

# Throughput is compared between runs of one configuration (the seed and repeat do not change
# it): real workers only (mode=ddp), where samples/s is what the machine delivers.
CONFIG_KEY = list(results.schema.COMPARE_KEY)
CONFIG_NAMES = {"per_worker_batch": "per-worker batch", "sync_label": "sync", "lr_rule": "LR rule"}


@dataclass
class Compared(Written):
    """A written comparison, with its ratios and the configurations below ``fail_below``."""

    ratios: pd.DataFrame = field(default_factory=pd.DataFrame)
    regressed: pd.DataFrame = field(default_factory=pd.DataFrame)


def default_out(dirs: list[str | Path]) -> Path:
    names = [Path(d).resolve().name for d in dirs]
    return Path("reports") / ("compare-" + "-vs-".join(names))


def machine_order(runs: pd.DataFrame, comm: pd.DataFrame) -> list[str]:
    """Machines in the order their directories were given (the first is the baseline A)."""
    seen: list[str] = []
    for frame in (runs, comm):
        if not frame.empty:
            for m in frame.sort_values("source_index", kind="stable")["machine"]:
                if m not in seen:
                    seen.append(m)
    return seen


def ratio_table(runs: pd.DataFrame, machines: list[str]) -> pd.DataFrame:
    """One row per configuration run on the baseline machine A and on another machine B:
    median samples/s on each, B ÷ A and the bootstrap interval of that ratio over the repeats."""
    done = runs[(runs["mode"] == "ddp") & (runs["status"] == "complete")]
    done = done[done["samples_per_s"] > 0]
    if done.empty or len(machines) < 2:
        return pd.DataFrame()
    keys = ["machine", *CONFIG_KEY]
    measured = done.groupby(keys, dropna=False)["samples_per_s"].apply(list)
    crowded = done.groupby(keys, dropna=False)["oversubscribed"].any()
    a = machines[0]
    rows = []
    for b in machines[1:]:
        for key, on_a in measured.items():
            if key[0] != a or (b, *key[1:]) not in measured.index:
                continue
            on_b = measured[(b, *key[1:])]
            low, high = stats.ratio_ci(on_a, on_b)
            over = [side for side, k in (("A", key), ("B", (b, *key[1:]))) if crowded[k]]
            rows.append(
                {
                    **dict(zip(CONFIG_KEY, key[1:], strict=True)),
                    "A": a,
                    "B": b,
                    "runs_A": len(on_a),
                    "runs_B": len(on_b),
                    "samples_per_s_A": float(np.median(on_a)),
                    "samples_per_s_B": float(np.median(on_b)),
                    "ratio_B_over_A": float(np.median(on_b) / np.median(on_a)),
                    "ratio_low": low,
                    "ratio_high": high,
                    "oversubscribed": ", ".join(over),
                }
            )
    return pd.DataFrame(rows)


def regressions(ratios: pd.DataFrame, fail_below: float) -> pd.DataFrame:
    """Configurations whose B ÷ A is below ``fail_below`` beyond doubt: the whole interval is
    below it (with one run on a side there is no interval, and the ratio itself decides)."""
    if ratios.empty:
        return ratios
    upper = ratios["ratio_high"].fillna(ratios["ratio_B_over_A"])
    return ratios[upper < fail_below]


def config_label(row: pd.Series, varying: list[str]) -> str:
    """A configuration in words: workload, workers, per-worker batch, and what else varies."""
    text = f"{row['workload']}, {plural(int(row['workers']), 'worker')}, "
    text += f"{int(row['per_worker_batch'])}/worker"
    extra = [f"{CONFIG_NAMES.get(k, k)} {row[k]}" for k in varying]
    return ", ".join([text, *extra])


def varying_keys(ratios: pd.DataFrame) -> list[str]:
    rest = [k for k in CONFIG_KEY if k not in ("workload", "workers", "per_worker_batch")]
    return [k for k in rest if ratios[k].nunique(dropna=False) > 1]


def ratio_text(row: pd.Series) -> str:
    ci = (
        f" ({row['ratio_low']:.2f}–{row['ratio_high']:.2f})"
        if pd.notna(row["ratio_low"]) and pd.notna(row["ratio_high"])
        else ""
    )
    return f"{row['ratio_B_over_A']:.2f}×{ci}"


def ratio_display(ratios: pd.DataFrame) -> pd.DataFrame:
    """The ratio table as it is printed and shown first in the report: A and B are named in
    the heading (see `pair_names`), and only get a column when several machines are B."""
    varying = varying_keys(ratios)
    table = pd.DataFrame(
        {
            "configuration": [config_label(r, varying) for _, r in ratios.iterrows()],
            "B": ratios["B"],
            "A samples/s": ratios["samples_per_s_A"].map(lambda v: f"{v:,.0f}"),
            "B samples/s": ratios["samples_per_s_B"].map(lambda v: f"{v:,.0f}"),
            "B ÷ A (95 % CI)": [ratio_text(r) for _, r in ratios.iterrows()],
            "runs A/B": ratios["runs_A"].astype(str) + "/" + ratios["runs_B"].astype(str),
            "oversubscribed": ratios["oversubscribed"],
        }
    )
    if ratios["B"].nunique() == 1:
        table = table.drop(columns="B")
    if not ratios["oversubscribed"].astype(bool).any():
        table = table.drop(columns="oversubscribed")
    return table


def ratio_lines(ratios: pd.DataFrame) -> str:
    """The ratio table for the terminal: configurations left-aligned, numbers right-aligned."""
    table = ratio_display(ratios)
    width = int(max(table["configuration"].str.len().max(), len("configuration")))
    table["configuration"] = table["configuration"].str.ljust(width)
    return table.rename(columns={"configuration": "configuration".ljust(width)}).to_string(
        index=False
    )


def pair_names(ratios: pd.DataFrame) -> str:
    return f"A: {ratios['A'].iloc[0]}, B: {', '.join(dict.fromkeys(ratios['B']))}"


def ratio_findings(ratios: pd.DataFrame, machines: list[str]) -> list[str]:
    if len(machines) < 2:
        only = machines[0] if machines else "?"
        return [
            f"All results come from one machine (`{only}`): nothing to compare. Set "
            "`hardware.tag` on each machine to name them apart."
        ]
    out = []
    a = machines[0]
    for b in machines[1:]:
        pair = ratios[ratios["B"] == b] if len(ratios) else ratios
        if pair.empty:
            out.append(f"No configuration was run with real workers on both `{a}` and `{b}`.")
            continue
        r = pair["ratio_B_over_A"]
        out.append(
            f"Over {plural(len(pair), 'configuration')} run on both, `{b}` has {r.median():.2f}× "
            f"the throughput of `{a}` (median; from {r.min():.2f}× to {r.max():.2f}×)."
        )
    return out


def regression_lines(regressed: pd.DataFrame, ratios: pd.DataFrame) -> list[str]:
    """One line per configuration that regressed: what, on which machine, by how much."""
    varying = varying_keys(ratios)
    return [
        f"{config_label(r, varying)}: {r['B']} / {r['A']} = {ratio_text(r)}"
        for _, r in regressed.iterrows()
    ]


def regression_finding(regressed: pd.DataFrame, ratios: pd.DataFrame, fail_below: float) -> str:
    if regressed.empty:
        return (
            f"No configuration is below {fail_below:g}× its throughput on `{ratios['A'].iloc[0]}`."
        )
    varying = varying_keys(ratios)
    named = "; ".join(
        f"{config_label(r, varying)} on `{r['B']}`: {ratio_text(r)}"
        for _, r in regressed.iterrows()
    )
    return (
        f"{plural(len(regressed), 'configuration')} regressed below {fail_below:g}× the "
        f"throughput on `{ratios['A'].iloc[0]}`: {named}."
    )


def build_compare(
    dirs: list[str | Path], out: str | Path | None = None, fail_below: float | None = None
) -> Compared:
    """Read every directory, group runs by machine, write the comparison; with ``fail_below``,
    also name the configurations whose throughput ratio B ÷ A is below it."""
    if not dirs:
        raise UserError("compare needs at least one results directory")
    trees = [data.load_tree(d) for d in dirs]
    out = prepare_out(Path(out) if out is not None else default_out(dirs))
    runs = pd.concat(
        [t.runs.assign(source=display_path(t.source), source_index=i) for i, t in enumerate(trees)],
        ignore_index=True,
    )
    comm_parts = [
        t.comm.assign(source=display_path(t.source), source_index=i)
        for i, t in enumerate(trees)
        if not t.comm.empty
    ]
    comm = pd.concat(comm_parts, ignore_index=True) if comm_parts else pd.DataFrame()
    machines = machine_order(runs, comm)
    report = render.Report(
        title="dpsuite comparison: " + " vs ".join(f"{m}" for m in machines),
        meta=[
            "Results: " + ", ".join(f"`{display_path(t.source)}`" for t in trees),
            *machines_lines(runs, comm, machines),
        ],
    )
    ratios = ratio_table(runs, machines) if not runs.empty else pd.DataFrame()
    regressed = regressions(ratios, fail_below) if fail_below is not None else pd.DataFrame()
    report.headline = ratio_findings(ratios, machines)
    if fail_below is not None and len(ratios):
        report.headline.append(regression_finding(regressed, ratios, fail_below))
    if len(ratios):
        report.lead_tables.append(
            render.Table(
                f"Throughput B ÷ A per configuration ({pair_names(ratios)})",
                ratio_display(ratios),
                f"A is `{machines[0]}` (the first directory), B each other machine: B ÷ A > 1 "
                "means B is faster. Median samples/s over the complete runs of each "
                "configuration (seeds and repeats); in brackets the 95 % bootstrap interval of "
                "the ratio, resampling each machine's runs (none with one run on a side). "
                "Every column is in `ratios.csv`.",
            )
        )
        owned.write(out / "ratios.csv", ratios.to_csv(index=False))
    figs = FigureWriter(out)
    by_machine = ("machine", "workload", "per_worker_batch")
    scaling = data.scaling_table(runs, always=by_machine) if not runs.empty else pd.DataFrame()
    if not scaling.empty:
        figs.add(
            "throughput",
            plots.throughput_vs_workers(scaling, machines),
            "Throughput vs workers, per machine",
            "One panel per workload; colour: machine, marker: per-worker batch. Median measured "
            "samples/s of complete DDP runs (bars: 95 % bootstrap interval over repeats); "
            "dashed: ideal linear scaling; hollow: oversubscribed.",
        )
        figs.add(
            "efficiency",
            plots.efficiency_vs_workers(scaling, machines),
            "Scaling efficiency vs workers, per machine",
            "Throughput at N workers over N × the throughput at the smallest worker count, on "
            "the same machine; colour: machine, marker: per-worker batch.",
        )
        report.findings += findings.scaling_findings(scaling)
        report.file("Scaling")
    if not comm.empty:
        figs.add(
            "allreduce_bandwidth",
            plots.allreduce_bandwidth(comm, machines),
            f"{data.collectives_label(comm)} bandwidth vs message size, per machine",
            "From `dpsuite comm-bench`: busbw and algbw (nccl-tests definitions); colour: "
            "machine (the collective when there are several), line style: rank count.",
        )
        report.findings += findings.comm_bench_findings(comm)
        report.file("All-reduce")
    report.figures = figs.figures
    report.warnings = [w for t in trees for w in t.warnings]
    summary = data.summary_frame(runs) if not runs.empty else pd.DataFrame(columns=["machine"])
    data.write_summary(summary.drop(columns=["source_index"], errors="ignore"), out)
    render.write(report, out)
    owned.finish(out)
    return Compared(
        out=out,
        warnings=report.warnings,
        headline=report.headline,
        ratios=ratios,
        regressed=regressed,
    )
