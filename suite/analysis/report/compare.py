"""`dpsuite compare`: several results trees side by side, in pairs of a baseline A and a
candidate B.

The sides are machines by default (a run's `hardware.tag`, or its host and hardware fingerprint
when untagged), or the values of a setting (``--by``); `compare_sides` pairs them (and says which
it left out). Every candidate B is compared with its baseline A as B ÷ A, the way a benchmark run
is compared with a saved one, so that ``--fail-below`` can gate a regression; the gate's lines
name both sides. A comparison with nothing to compare is an error, not an empty report.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dpsuite import results
from dpsuite.analysis.report import compare_sides, data, render, stats
from dpsuite.analysis.report.compare_sides import ENV_PREFIX, RUN_SETTINGS, Pairing
from dpsuite.analysis.report.meta import display_path, machines_lines
from dpsuite.analysis.report.output import FigureWriter, Written, prepare_out
from dpsuite.analysis.report.read_once import count_once
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


@dataclass
class Compared(Written):
    """A written comparison, with its ratios and the configurations below ``fail_below``."""

    ratios: pd.DataFrame = field(default_factory=pd.DataFrame)
    regressed: pd.DataFrame = field(default_factory=pd.DataFrame)
    noisy: pd.DataFrame = field(default_factory=pd.DataFrame)  # below the gate, too wide to call
    pairing: Pairing = field(default_factory=lambda: Pairing(compare_sides.MACHINE))
    # Per pair (A, B): each side in words: its directories and the settings it differs in.
    described: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)


def default_out(dirs: list[str | Path]) -> Path:
    names = [Path(d).resolve().name for d in dirs]
    return Path("reports") / ("compare-" + "-vs-".join(names))


def config_key(by: str) -> list[str]:
    """What makes runs of two sides the same configuration: `CONFIG_KEY`, less the setting the
    sides are grouped by (runs at bf16 and fp32 are compared when that is the question)."""
    named = {by, by.removeprefix("config.")}
    if named & {"sync", "sync_label"}:
        named.add("sync_label")
    return [k for k in CONFIG_KEY if k not in named]


def ratio_table(runs: pd.DataFrame, pairs: list[tuple[str, str]], key: list[str]) -> pd.DataFrame:
    """One row per configuration run on both sides of a pair (``machine`` holds each run's
    side): median samples/s on each, B ÷ A and the bootstrap interval of that ratio over the
    repeats."""
    done = runs[(runs["mode"] == "ddp") & (runs["status"] == "complete")]
    done = done[done["samples_per_s"] > 0]
    if done.empty or not pairs:
        return pd.DataFrame()
    keys = ["machine", *key]
    measured = done.groupby(keys, dropna=False)["samples_per_s"].apply(list)
    crowded = done.groupby(keys, dropna=False)["oversubscribed"].any()
    rows = []
    for a, b in pairs:
        for at_a, on_a in measured.items():
            at_b = (b, *at_a[1:])
            if at_a[0] != a or at_b not in measured.index:
                continue
            on_b = measured[at_b]
            low, high = stats.ratio_ci(on_a, on_b)
            over = [side for side, k in (("A", at_a), ("B", at_b)) if crowded[k]]
            rows.append(
                {
                    **{k: np.nan for k in CONFIG_KEY},
                    **dict(zip(key, at_a[1:], strict=True)),
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
    values = sorted({compare_sides.text(v) for v in runs[column] if not compare_sides.missing(v)})
    return ", ".join(values) if values else "unset"


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
    key = [k for k in CONFIG_KEY if ratios[k].notna().any()]  # less the setting compared
    return runs.merge(ratios[key].drop_duplicates(), on=key, how="inner")


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
    the heading (see `pair_names`); a column names the pair when there are several."""
    varying = varying_keys(ratios)
    table = pd.DataFrame(
        {
            "configuration": [config_label(r, varying) for _, r in ratios.iterrows()],
            "B / A": ratios["B"] + " / " + ratios["A"],
            "B": ratios["B"],
            "A samples/s": ratios["samples_per_s_A"].map(lambda v: f"{v:,.0f}"),
            "B samples/s": ratios["samples_per_s_B"].map(lambda v: f"{v:,.0f}"),
            "B ÷ A (95 % CI)": [ratio_text(r) for _, r in ratios.iterrows()],
            "runs A/B": ratios["runs_A"].astype(str) + "/" + ratios["runs_B"].astype(str),
            "oversubscribed": ratios["oversubscribed"],
        }
    )
    several_a = ratios["A"].nunique() > 1
    table = table.drop(columns="B" if several_a else "B / A")
    if not several_a and ratios["B"].nunique() == 1:
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
    """The sides in a heading: "A: a, B: b1, b2", or the pairs where the baselines differ."""
    if ratios["A"].nunique() == 1:
        return f"A: {ratios['A'].iloc[0]}, B: {', '.join(dict.fromkeys(ratios['B']))}"
    pairs = dict.fromkeys(zip(ratios["B"], ratios["A"], strict=True))
    return "pairs B / A: " + "; ".join(f"{b} / {a}" for b, a in pairs)


def ratio_findings(ratios: pd.DataFrame, pairs: list[tuple[str, str]]) -> list[str]:
    """Per pair, the median B ÷ A over the configurations run on both, and its noise."""
    out = []
    for a, b in pairs:
        pair = ratios[(ratios["A"] == a) & (ratios["B"] == b)] if len(ratios) else ratios
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


def sides_text(row: pd.Series, described: dict[tuple[str, str], tuple[str, str]]) -> str:
    """A ratio's two sides in words: "candidate B `b` (dir; settings) / baseline A `a` (...)"."""
    a_text, b_text = described.get((row["A"], row["B"]), ("", ""))
    a_text, b_text = (f" ({t})" if t else "" for t in (a_text, b_text))
    return f"candidate B `{row['B']}`{b_text} / baseline A `{row['A']}`{a_text}"


def regression_lines(
    regressed: pd.DataFrame,
    ratios: pd.DataFrame,
    fail_below: float,
    described: dict[tuple[str, str], tuple[str, str]],
) -> list[str]:
    """One line per configuration that regressed: what, which side against which, by how much."""
    varying = varying_keys(ratios)
    return [
        f"{config_label(r, varying)}: {sides_text(r, described)} = {ratio_text(r)} < "
        f"{fail_below:g}: FAIL"
        for _, r in regressed.iterrows()
    ]


def noisy_lines(
    noisy: pd.DataFrame,
    ratios: pd.DataFrame,
    max_spread: float,
    described: dict[tuple[str, str], tuple[str, str]],
) -> list[str]:
    """One line per configuration below the gate whose interval is too wide to call."""
    varying = varying_keys(ratios)
    return [
        f"{config_label(r, varying)}: {sides_text(r, described)} = "
        f"{r['ratio_B_over_A']:.2f}× ({r['ratio_low']:.2f}–{r['ratio_high']:.2f}), its ends "
        f"{r['ratio_high'] / r['ratio_low']:.1f}× apart (limit {max_spread:g}×)"
        for _, r in noisy.iterrows()
    ]


def gate_lines(compared: Compared, fail_below: float) -> list[str]:
    """The gate's verdict per pair, naming what it judged: which side is the baseline."""
    out = []
    for (a, b), _ in compared.described.items():
        pair = compared.ratios[(compared.ratios["A"] == a) & (compared.ratios["B"] == b)]
        if pair.empty:
            continue
        failed = _count(compared.regressed, a, b)
        noisy = _count(compared.noisy, a, b)
        verdict = "FAIL" if failed else "TOO NOISY" if noisy else "PASS"
        below = f"{failed} of {len(pair)} configurations below {fail_below:g}"
        if noisy:
            below += f", {noisy} too noisy to call"
        out.append(f"{sides_text(pair.iloc[0], compared.described)}: {below}: {verdict}")
    return out


def _count(frame: pd.DataFrame, a: str, b: str) -> int:
    return int(((frame["A"] == a) & (frame["B"] == b)).sum()) if len(frame) else 0


def regression_finding(
    regressed: pd.DataFrame, ratios: pd.DataFrame, fail_below: float, noisy: pd.DataFrame
) -> str:
    varying = varying_keys(ratios)
    baseline = (
        f"its throughput on `{ratios['A'].iloc[0]}`"
        if ratios["A"].nunique() == 1
        else "its baseline's throughput"
    )
    if regressed.empty:
        text = f"No configuration is below {fail_below:g}× {baseline}."
    else:
        named = "; ".join(
            f"{config_label(r, varying)} on `{r['B']}`: {ratio_text(r)}"
            for _, r in regressed.iterrows()
        )
        text = (
            f"{plural(len(regressed), 'configuration')} regressed below {fail_below:g}× "
            f"{baseline.replace('its ', 'the ', 1)}: {named}."
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
    by: str | None = None,
) -> Compared:
    """Read every directory, pair its sides (machines, or the values of ``by``), write the
    comparison; with ``fail_below``, also name the configurations whose throughput ratio B ÷ A
    is below it. A configuration whose interval spans more than ``max_spread`` is too noisy to
    call a regression on (it is in ``noisy`` instead), unless ``allow_noisy``. Nothing to
    compare is a `UserError`, before anything is written."""
    if not dirs:
        raise UserError("compare needs at least one results directory")
    trees = [data.load_tree(d) for d in dict.fromkeys(Path(d).resolve() for d in dirs)]
    count_once(trees)
    runs, comm, pairing, ratios = paired(trees, by)
    out = prepare_out(Path(out) if out is not None else default_out(dirs))
    sides = pairing.sides
    regressed, noisy = judge(ratios, fail_below, max_spread, allow_noisy)
    report = render.Report(
        title="dpsuite comparison: " + " vs ".join(sides),
        meta=[
            "Results: " + ", ".join(f"`{display_path(t.source)}`" for t in trees),
            *side_lines(runs, comm, pairing, ratios),
            *pairing_lines(pairing),
        ],
        headline=ratio_findings(ratios, pairing.pairs),
    )
    if fail_below is not None and len(ratios):
        report.headline.append(regression_finding(regressed, ratios, fail_below, noisy))
    if len(ratios):
        report.lead_tables.append(ratio_lead_table(ratios, max_spread))
        owned.write(out / "ratios.csv", ratios.to_csv(index=False))
    add_sections(report, runs, comm, sides, out)
    report.warnings = [w for t in trees for w in t.warnings]
    summary = data.summary_frame(runs) if not runs.empty else pd.DataFrame(columns=["machine"])
    units = data.shared_units(trees) if not runs.empty else None
    data.write_summary(summary.drop(columns=["source_index"], errors="ignore"), out, units)
    render.write(report, out)
    owned.finish(out)
    return Compared(
        out=out,
        warnings=report.warnings,
        headline=report.headline,
        ratios=ratios,
        regressed=regressed,
        noisy=noisy,
        pairing=pairing,
        described=described_pairs(runs, pairing),
    )


def add_sections(
    report: render.Report, runs: pd.DataFrame, comm: pd.DataFrame, sides: list[str], out: Path
) -> None:
    """The scaling and all-reduce sections, side by side: their plots, findings and topics."""
    figs = FigureWriter(out)
    for topic, part in (
        (scaling_section.TOPIC, scaling_part(runs, sides)),
        (comm_section.TOPIC, comm_part(comm, sides)),
    ):
        for plot in part.plots:
            figs.add(plot)
        report.findings += part.findings
        report.file(topic)
    report.figures = figs.write()


# What a configuration is: never a side of a comparison.
NOT_BY = ("workload", "workers", "per_worker_batch", "lr_rule")


def paired(
    trees: list[data.ResultsTree], by: str | None
) -> tuple[pd.DataFrame, pd.DataFrame, Pairing, pd.DataFrame]:
    """The runs and comm-bench rows with each one's side in ``machine`` (its machine in
    ``host_machine``), only those of a side; the pairing; the ratio table. A `UserError` in
    one line when that leaves nothing to compare."""
    if by is not None and by.removeprefix("config.") in NOT_BY:
        raise UserError(
            f"--by {by}: that is part of what a configuration is (workload, workers, per-worker "
            "batch, LR rule); compare by a setting, e.g. --by hardware.torch"
        )
    runs, comm = combined(trees)
    rows = runs if not runs.empty else comm
    pairing = compare_sides.pair(rows, by, CONFIG_KEY)
    runs, comm = on_sides(runs, pairing), on_sides(comm, pairing)
    key = config_key(pairing.by)
    ratios = ratio_table(runs, pairing.pairs, key) if not runs.empty else pd.DataFrame()
    if ratios.empty and (comm.empty or comm["machine"].nunique() < 2):
        raise UserError(nothing_to_compare(rows, pairing, by))
    return runs, comm, pairing, ratios


def on_sides(rows: pd.DataFrame, pairing: Pairing) -> pd.DataFrame:
    """The rows of a side, each with its side as ``machine``."""
    if rows.empty:
        return rows
    labelled = rows.copy().assign(host_machine=rows["machine"], machine=pairing.label(rows))
    return labelled[labelled["machine"].isin(pairing.sides)].reset_index(drop=True)


def nothing_to_compare(rows: pd.DataFrame, pairing: Pairing, by: str | None) -> str:
    """Why a comparison has nothing to compare, and what would give it something."""
    if pairing.pairs:
        pairs = "; ".join(f"`{b}` / `{a}`" for a, b in pairing.pairs)
        return (
            f"nothing to compare: no configuration was run with real workers on both sides of "
            f"{pairs}"
        )
    column = pairing.by
    if column not in (compare_sides.MACHINE, compare_sides.DIR) and column not in rows.columns:
        return f"nothing to compare: no run records `{by}` (--by takes {by_examples(rows)})"
    if pairing.unpaired:
        return "nothing to compare: " + "; ".join(pairing.unpaired)
    machine = rows["machine"].iloc[0]
    if pairing.suggest:
        named = ", ".join(f"--by {c}" for c in pairing.suggest)
        return (
            f"nothing to compare: every run is on `{machine}`, and several of its settings "
            f"differ between runs of a configuration: choose one ({named})"
        )
    return (
        f"nothing to compare: every run is on `{machine}` with the same settings; give another "
        "machine's results (hardware.tag=NAME names a machine) or --by a setting that differs"
    )


def by_examples(rows: pd.DataFrame) -> str:
    """A few values --by takes, for an error message."""
    found = [c for c in ("hardware.torch", "backend", "threads_per_worker") if c in rows.columns]
    return ", ".join([*found, "config.KEY", compare_sides.DIR, compare_sides.MACHINE])


def side_lines(
    runs: pd.DataFrame, comm: pd.DataFrame, pairing: Pairing, ratios: pd.DataFrame
) -> list[str]:
    """A line per side: its hardware, and the settings its compared runs differ in."""
    sides = pairing.sides
    lines = with_differences(machines_lines(runs, comm, sides), sides, compared(runs, ratios))
    if pairing.by == compare_sides.MACHINE:
        return lines
    return ["Side " + line.removeprefix("Machine ") for line in lines]


def pairing_lines(pairing: Pairing) -> list[str]:
    """How the sides were chosen (where not given), which were paired, which left out."""
    lines = [pairing.note] if pairing.note else []
    pairs = "; ".join(f"`{b}` / `{a}`" for a, b in pairing.pairs)
    lines.append(f"Compared (candidate B / baseline A): {pairs}")
    if pairing.unpaired:
        lines.append("Not compared: " + "; ".join(pairing.unpaired))
    return lines


def described_pairs(runs: pd.DataFrame, pairing: Pairing) -> dict[tuple[str, str], tuple[str, str]]:
    """Per pair, each side in words: where its runs came from and the settings they differ in."""
    out = {}
    for a, b in pairing.pairs:
        both = runs[runs["machine"].isin([a, b])] if not runs.empty else runs
        differences = setting_differences(both, [a, b])
        texts = []
        for side in (a, b):
            sources = (
                []
                if both.empty or pairing.by == compare_sides.DIR
                else list(dict.fromkeys(both.loc[both["machine"] == side, "source"]))
            )
            texts.append(
                "; ".join(p for p in (", ".join(sources), ", ".join(differences[side])) if p)
            )
        out[(a, b)] = (texts[0], texts[1])
    return out


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


def ratio_lead_table(ratios: pd.DataFrame, max_spread: float) -> render.Table:
    """The ratio table, first in the report."""
    a = ratios["A"].iloc[0]
    sides = (
        f"A is `{a}`, the baseline (the first directory's), B each side compared with it"
        if ratios["A"].nunique() == 1
        else "A is the baseline of each pair (from the first directory), B its candidate"
    )
    return render.Table(
        f"Throughput B ÷ A per configuration ({pair_names(ratios)})",
        ratio_display(ratios),
        f"{sides}: B ÷ A > 1 means B is faster. Median samples/s over the complete runs of each "
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
