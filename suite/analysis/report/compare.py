"""`dpsuite compare`: several results trees side by side, grouped by machine.

A machine is a run's `hardware.tag`, or its host and hardware fingerprint when untagged, so two
directories from one machine merge and one directory holding two machines splits.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from suite.analysis.report import data, findings, plots, render
from suite.analysis.report.build import (
    FigureWriter,
    Written,
    display_path,
    machines_lines,
    prepare_out,
)
from suite.errors import UserError

# Runs match across machines when these agree (throughput does not depend on the seed).
CONFIG_KEY = [
    "workload",
    "mode",
    "workers",
    "per_worker_batch",
    "global_batch",
    "lr_rule",
    "precision",
]


def default_out(dirs: list[str | Path]) -> Path:
    names = [Path(d).resolve().name for d in dirs]
    return Path("reports") / ("compare-" + "-vs-".join(names))


def machine_order(runs: pd.DataFrame, comm: pd.DataFrame) -> list[str]:
    """Machines in the order their directories were given (the first is the reference A)."""
    seen: list[str] = []
    for frame in (runs, comm):
        if not frame.empty:
            for m in frame.sort_values("source_index", kind="stable")["machine"]:
                if m not in seen:
                    seen.append(m)
    return seen


def per_machine(runs: pd.DataFrame) -> pd.DataFrame:
    """Median samples/s, step time and final accuracy per machine and config (complete runs)."""
    done = runs[runs["status"] == "complete"]
    cols = ["samples_per_s", "step_time_s", "final_eval_acc"]
    return done.groupby(["machine", *CONFIG_KEY])[cols].median().reset_index()


def ratio_table(runs: pd.DataFrame, machines: list[str]) -> pd.DataFrame:
    """One row per config run on the reference machine and another: samples/s on A ÷ B."""
    med = per_machine(runs)
    a = machines[0]
    rows = []
    ref = med[med["machine"] == a].set_index(CONFIG_KEY)
    for b in machines[1:]:
        other = med[med["machine"] == b].set_index(CONFIG_KEY)
        both = ref.merge(other, left_index=True, right_index=True, suffixes=("_a", "_b"))
        for key, r in both.iterrows():
            rows.append(
                {
                    **dict(zip(CONFIG_KEY, key, strict=True)),
                    "A": a,
                    "B": b,
                    "samples_per_s_A": r["samples_per_s_a"],
                    "samples_per_s_B": r["samples_per_s_b"],
                    "throughput_A_div_B": r["samples_per_s_a"] / r["samples_per_s_b"],
                    "step_time_A_div_B": r["step_time_s_a"] / r["step_time_s_b"],
                    "final_acc_A_minus_B_points": 100
                    * (r["final_eval_acc_a"] - r["final_eval_acc_b"]),
                }
            )
    return pd.DataFrame(rows)


def ratio_findings(ratios: pd.DataFrame, machines: list[str]) -> list[str]:
    if len(machines) < 2:
        only = machines[0] if machines else "?"
        return [
            f"All results come from one machine (`{only}`): nothing to compare. Set "
            "`hardware.tag` on each machine to name them apart."
        ]
    out = []
    for b in machines[1:]:
        pair = ratios[ratios["B"] == b] if len(ratios) else ratios
        a = machines[0]
        if pair.empty:
            out.append(f"No configuration was run on both `{a}` and `{b}`; no ratios.")
            continue
        r = pair["throughput_A_div_B"]
        out.append(
            f"Over {len(pair)} configurations run on both, `{a}` has {r.median():.2f}× the "
            f"throughput of `{b}` (median; from {r.min():.2f}× to {r.max():.2f}×)."
        )
    return out


def build_compare(dirs: list[str | Path], out: str | Path | None = None) -> Written:
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
            *machines_lines(runs, comm),
        ],
    )
    figs = FigureWriter(out)
    by_machine = ("machine", "workload", "per_worker_batch")
    scaling = data.scaling_table(runs, always=by_machine) if not runs.empty else pd.DataFrame()
    if not scaling.empty:
        figs.add(
            "throughput",
            plots.throughput_vs_workers(scaling),
            "Throughput vs workers, per machine",
            "Median measured samples/s of complete DDP runs; dashed: ideal linear scaling.",
        )
        figs.add(
            "efficiency",
            plots.efficiency_vs_workers(scaling),
            "Scaling efficiency vs workers, per machine",
            "Throughput at N workers over N × the throughput at the smallest worker count.",
        )
    if not comm.empty:
        figs.add(
            "allreduce_bandwidth",
            plots.allreduce_bandwidth(comm),
            "All-reduce bandwidth vs message size, per machine",
            "From `dpsuite comm-bench`: busbw and algbw (nccl-tests definitions).",
        )
    ratios = ratio_table(runs, machines) if not runs.empty and machines else pd.DataFrame()
    report.findings = ratio_findings(ratios, machines)
    if not scaling.empty:
        report.findings += findings.scaling_findings(scaling)
    if not comm.empty:
        report.findings += findings.comm_bench_findings(comm)
    if len(ratios):
        report.tables.append(
            render.Table(
                "Throughput ratios per matching configuration",
                ratios,
                f"A is `{machines[0]}` (the first directory); B each other machine. "
                "throughput_A_div_B > 1: A is faster. Medians over seeds of complete runs.",
            )
        )
        ratios.to_csv(out / "ratios.csv", index=False)
    report.figures = figs.figures
    report.warnings = [w for t in trees for w in t.warnings]
    summary = data.summary_frame(runs) if not runs.empty else pd.DataFrame(columns=["machine"])
    summary.drop(columns=["source_index"], errors="ignore").to_csv(out / "summary.csv", index=False)
    render.write(report, out)
    return Written(out=out, warnings=report.warnings)
