"""`dpsuite compare`: several results trees side by side, grouped by machine.

A machine is a run's `hardware.tag`, or its host and hardware fingerprint when untagged, so two
directories from one machine merge and one directory holding two machines splits. The first
directory's machine is the baseline A; every other machine B is compared with it as B ÷ A, the
way a benchmark run is compared with a saved one, so that ``--fail-below`` can gate a regression.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dpsuite import results
from dpsuite.analysis.report import data, render, stats
from dpsuite.analysis.report.meta import display_path, machines_lines
from dpsuite.analysis.report.output import FigureWriter, Written, prepare_out
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.sections import comm as comm_section
from dpsuite.analysis.report.sections import scaling as scaling_section
from dpsuite.analysis.report.text import plural
from dpsuite.errors import UserError
from dpsuite.results import owned

# Throughput is compared between runs of one configuration (the seed and repeat do not change
# it): real workers only (mode=ddp), where samples/s is what the machine delivers.
CONFIG_KEY = list(results.schema.COMPARE_KEY)
CONFIG_NAMES = {"per_worker_batch": "per-worker batch", "sync_label": "sync", "lr_rule": "LR rule"}
# An interval of B ÷ A whose ends are further apart than this factor (high / low) is too noisy
# to call: the ratio is not known to within that factor (0.9–1.1 spans 1.22×, 0.01–0.36 spans
# 36×). `dpsuite compare --max-spread` sets it.
MAX_SPREAD = 2.0
# How the runs were made, beyond the configuration compared: a machine line names each one
# whose values differ between the machines (and every environment variable recorded).
RUN_SETTINGS = {
    "threads_per_worker": "threads/worker",
    "backend": "backend",
    "precision": "precision",
    "bucket_cap_mb": "bucket MiB",
    "device": "device",
    "comm_timing": "comm timing",
    "timed_steps": "timed steps",
    "config.workload.num_samples": "samples",
    "config.ddp.start_method": "start method",
    "config.timing.warmup_steps": "warmup steps",
    "config.timing.comm_every": "comm every",
    "config.timing.comm_hook": "comm hook",
    "hardware.cpus_usable": "usable cores",
    "hardware.cpus_allocated": "allocated cores",
    "hardware.torch": "torch",
    "hardware.cuda": "CUDA",
    "hardware.nccl": "NCCL",
    "hardware.cudnn": "cuDNN",
    "hardware.gpu_driver": "driver",
    "hardware.torch_debug_build": "torch debug build",
    "hardware.python": "python",
    "hardware.os_release": "OS",
}
ENV_PREFIX = "hardware.env."


@dataclass
class Compared(Written):
    """A written comparison, with its ratios and the configurations below ``fail_below``."""

    ratios: pd.DataFrame = field(default_factory=pd.DataFrame)
    regressed: pd.DataFrame = field(default_factory=pd.DataFrame)
    noisy: pd.DataFrame = field(default_factory=pd.DataFrame)  # below the gate, too wide to call


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


def setting_values(runs: pd.DataFrame, column: str) -> str:
    """The values a setting took in ``runs``, as text ("unset" where none was recorded)."""
    if column not in runs.columns:
        return "unset"
    values = sorted({_text(v) for v in runs[column] if not _missing(v)})
    return ", ".join(values) if values else "unset"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def setting_differences(runs: pd.DataFrame, machines: list[str]) -> dict[str, list[str]]:
    """Per machine, each run setting whose values differ between the machines, e.g.
    ``threads/worker 2`` or ``NCCL_ALGO=Ring``; what all machines share is left out."""
    if runs.empty or "machine" not in runs.columns or len(machines) < 2:
        return {m: [] for m in machines}
    env = sorted(c for c in runs.columns if c.startswith(ENV_PREFIX))
    names = {**RUN_SETTINGS, **{c: c.removeprefix(ENV_PREFIX) for c in env}}
    by_machine = {m: runs[runs["machine"] == m] for m in machines}
    out: dict[str, list[str]] = {m: [] for m in machines}
    for column, name in names.items():
        values = {m: setting_values(frame, column) for m, frame in by_machine.items()}
        if len(set(values.values())) < 2:
            continue
        for m, value in values.items():
            out[m].append(f"{name}={value}" if column in env else f"{name} {value}")
    return out


def with_differences(lines: list[str], machines: list[str], runs: pd.DataFrame) -> list[str]:
    """The machine lines, each followed by the settings in which its runs differ from the
    other machines' (the threads, backend, precision, bucket size, NCCL_* ... of a side)."""
    differences = setting_differences(runs, machines)
    return [
        f"{line}; differs: {', '.join(differences[m])}" if differences.get(m) else line
        for line, m in zip(lines, machines, strict=False)
    ]


def compared(runs: pd.DataFrame, ratios: pd.DataFrame) -> pd.DataFrame:
    """The runs of the configurations in the ratio table (all runs when there is none): a
    setting differs between the sides of a comparison, not between what each side ran."""
    if ratios.empty:
        return runs
    return runs.merge(ratios[CONFIG_KEY].drop_duplicates(), on=CONFIG_KEY, how="inner")


def too_noisy(ratios: pd.DataFrame, max_spread: float) -> pd.Series:
    """Configurations whose interval of B ÷ A spans more than ``max_spread`` (high / low)."""
    return (ratios["ratio_high"] / ratios["ratio_low"]).gt(max_spread)


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
    noisy = " too noisy" if bool(row.get("too_noisy", False)) else ""
    return f"{row['ratio_B_over_A']:.2f}×{ci}{noisy}"


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
        noise = noise_finding(
            pair, varying_keys(ratios), ratios.attrs.get("max_spread", MAX_SPREAD)
        )
        if noise:
            out.append(noise)
    return out


def noise_finding(pair: pd.DataFrame, varying: list[str], max_spread: float) -> str | None:
    """The configurations of one pair of machines whose interval is too wide to call, in words."""
    if "too_noisy" not in pair.columns or not pair["too_noisy"].any():
        return None
    noisy = pair[pair["too_noisy"]]
    spread = noisy["ratio_high"] / noisy["ratio_low"]
    worst = noisy.loc[spread.idxmax()]
    some = "all" if len(noisy) == len(pair) else f"{len(noisy)} of {len(pair)}"
    interval = (
        f"{worst['ratio_B_over_A']:.2f}× ({worst['ratio_low']:.2f}–{worst['ratio_high']:.2f})"
    )
    return (
        f"Too noisy to call: rerun. {some.capitalize()} configurations on `{worst['B']}` have a "
        f"95 % interval of B ÷ A spanning more than {max_spread:g}× (widest: "
        f"{config_label(worst, varying)}, {interval}): more repeats, or a quieter machine, "
        "before reading a ratio."
    )


def regression_lines(regressed: pd.DataFrame, ratios: pd.DataFrame) -> list[str]:
    """One line per configuration that regressed: what, on which machine, by how much."""
    varying = varying_keys(ratios)
    return [
        f"{config_label(r, varying)}: {r['B']} / {r['A']} = {ratio_text(r)}"
        for _, r in regressed.iterrows()
    ]


def noisy_lines(noisy: pd.DataFrame, ratios: pd.DataFrame, max_spread: float) -> list[str]:
    """One line per configuration below the gate whose interval is too wide to call."""
    varying = varying_keys(ratios)
    return [
        f"{config_label(r, varying)}: {r['B']} / {r['A']} = {r['ratio_B_over_A']:.2f}× "
        f"({r['ratio_low']:.2f}–{r['ratio_high']:.2f}), its ends "
        f"{r['ratio_high'] / r['ratio_low']:.1f}× apart (limit {max_spread:g}×)"
        for _, r in noisy.iterrows()
    ]


def regression_finding(
    regressed: pd.DataFrame, ratios: pd.DataFrame, fail_below: float, noisy: pd.DataFrame
) -> str:
    varying = varying_keys(ratios)
    if regressed.empty:
        text = (
            f"No configuration is below {fail_below:g}× its throughput on `{ratios['A'].iloc[0]}`."
        )
    else:
        named = "; ".join(
            f"{config_label(r, varying)} on `{r['B']}`: {ratio_text(r)}"
            for _, r in regressed.iterrows()
        )
        text = (
            f"{plural(len(regressed), 'configuration')} regressed below {fail_below:g}× the "
            f"throughput on `{ratios['A'].iloc[0]}`: {named}."
        )
    if noisy.empty:
        return text
    named = "; ".join(f"{config_label(r, varying)}: {ratio_text(r)}" for _, r in noisy.iterrows())
    return (
        f"{text} Below {fail_below:g}× but too noisy to call (interval wider than "
        f"{ratios.attrs.get('max_spread', MAX_SPREAD):g}×): {named}; rerun them."
    )


def build_compare(
    dirs: list[str | Path],
    out: str | Path | None = None,
    fail_below: float | None = None,
    max_spread: float = MAX_SPREAD,
    allow_noisy: bool = False,
) -> Compared:
    """Read every directory, group runs by machine, write the comparison; with ``fail_below``,
    also name the configurations whose throughput ratio B ÷ A is below it. A configuration
    whose interval spans more than ``max_spread`` is too noisy to call a regression on (it is
    in ``noisy`` instead), unless ``allow_noisy``."""
    if not dirs:
        raise UserError("compare needs at least one results directory")
    trees = [data.load_tree(d) for d in dirs]
    out = prepare_out(Path(out) if out is not None else default_out(dirs))
    runs, comm = combined(trees)
    machines = machine_order(runs, comm)
    ratios = ratio_table(runs, machines) if not runs.empty else pd.DataFrame()
    report = render.Report(
        title="dpsuite comparison: " + " vs ".join(f"{m}" for m in machines),
        meta=[
            "Results: " + ", ".join(f"`{display_path(t.source)}`" for t in trees),
            *with_differences(
                machines_lines(runs, comm, machines), machines, compared(runs, ratios)
            ),
        ],
    )
    regressed, noisy = judge(ratios, fail_below, max_spread, allow_noisy)
    report.headline = ratio_findings(ratios, machines)
    if fail_below is not None and len(ratios):
        report.headline.append(regression_finding(regressed, ratios, fail_below, noisy))
    if len(ratios):
        report.lead_tables.append(ratio_lead_table(ratios, machines, max_spread))
        owned.write(out / "ratios.csv", ratios.to_csv(index=False))
    figs = FigureWriter(out)
    for topic, part in (
        (scaling_section.TOPIC, scaling_part(runs, machines)),
        (comm_section.TOPIC, comm_part(comm, machines)),
    ):
        for plot in part.plots:
            figs.add(plot)
        report.findings += part.findings
        report.file(topic)
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
        noisy=noisy,
    )


def combined(trees: list[data.ResultsTree]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every tree's runs and comm-bench rows in one frame each, with the directory they came
    from (``source``) and its place on the command line (``source_index``)."""
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
    return runs, comm


def judge(
    ratios: pd.DataFrame, fail_below: float | None, max_spread: float, allow_noisy: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mark each ratio's spread (and whether it is too noisy, in place); then (regressed, noisy):
    the configurations below ``fail_below``, those too noisy to call kept apart unless
    ``allow_noisy``."""
    if len(ratios):
        ratios["ratio_spread"] = ratios["ratio_high"] / ratios["ratio_low"]
        ratios["too_noisy"] = too_noisy(ratios, max_spread)
        ratios.attrs["max_spread"] = max_spread
    regressed = regressions(ratios, fail_below) if fail_below is not None else pd.DataFrame()
    noisy = regressed.iloc[0:0] if len(regressed) else pd.DataFrame()
    if len(regressed) and not allow_noisy:
        noisy, regressed = regressed[regressed["too_noisy"]], regressed[~regressed["too_noisy"]]
    return regressed, noisy


def ratio_lead_table(ratios: pd.DataFrame, machines: list[str], max_spread: float) -> render.Table:
    """The ratio table, first in the report."""
    return render.Table(
        f"Throughput B ÷ A per configuration ({pair_names(ratios)})",
        ratio_display(ratios),
        f"A is `{machines[0]}` (the first directory), B each other machine: B ÷ A > 1 "
        "means B is faster. Median samples/s over the complete runs of each "
        "configuration (seeds and repeats); in brackets the 95 % bootstrap interval of "
        "the ratio, resampling each machine's runs (none with one run on a side); "
        f"too noisy: its ends are more than {max_spread:g}× apart. "
        "Every column is in `ratios.csv`.",
    )


def scaling_part(runs: pd.DataFrame, machines: list[str]) -> Section:
    """Throughput and efficiency against workers, one colour per machine, and their findings."""
    by_machine = ("machine", "workload", "per_worker_batch")
    scaling = data.scaling_table(runs, always=by_machine) if not runs.empty else pd.DataFrame()
    part = Section()
    if scaling.empty:
        return part
    part.plot(
        "throughput",
        functools.partial(scaling_section.throughput_vs_workers, scaling, machines),
        "Throughput vs workers, per machine",
        "One panel per workload; colour: machine, marker: per-worker batch. Median measured "
        "samples/s of complete DDP runs (bars: 95 % bootstrap interval over repeats); "
        "dashed: ideal linear scaling; hollow: oversubscribed.",
    )
    part.plot(
        "efficiency",
        functools.partial(scaling_section.efficiency_vs_workers, scaling, machines),
        "Scaling efficiency vs workers, per machine",
        "Throughput at N workers over N × the throughput at the smallest worker count, on "
        "the same machine; colour: machine, marker: per-worker batch.",
    )
    part.findings += scaling_section.scaling_findings(scaling)
    return part


def comm_part(comm: pd.DataFrame, machines: list[str]) -> Section:
    """Every machine's comm-bench bandwidth in one plot, and its findings."""
    part = Section()
    if comm.empty:
        return part
    part.plot(
        "allreduce_bandwidth",
        functools.partial(comm_section.allreduce_bandwidth, comm, machines),
        f"{data.collectives_label(comm)} bandwidth vs message size, per machine",
        "From `dpsuite comm-bench`: busbw and algbw (nccl-tests definitions); colour: "
        "machine (the collective when there are several), line style: rank count.",
    )
    part.findings += comm_section.comm_bench_findings(comm)
    return part
