"""Load a results tree for a report and derive the tables the plots and findings are drawn from.

Everything here reads results files through `dpsuite.results` only; nothing imports the engine.
Problems with single files become warnings (the report goes on); a directory that holds no
readable results at all is a `UserError`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpsuite import results
from dpsuite.analysis.report import scaling_fairness, scaling_validity, seed_split, stats
from dpsuite.analysis.report.run_frames import RunFrames, stacked
from dpsuite.errors import UserError
from dpsuite.optim.lr_rules import RULES
from dpsuite.results import owned
from dpsuite.results.gate import shared_walk
from dpsuite.results.store import COMM_BENCH_JSON, INPUT_BENCH_JSON

RUN_COLUMNS = list(results.schema.SUMMARY_COLUMNS)
TEXT_COLUMNS = {
    c for c in RUN_COLUMNS if (f := results.schema.lookup(c)) is None or f.type == "str"
}
NUMERIC_COLUMNS = [
    c for c in RUN_COLUMNS if c not in TEXT_COLUMNS and not c.startswith("hardware.")
]
RULE_ORDER = tuple(RULES)  # the registry's order: legends, colours, tables
EFFICIENCY_THRESHOLD = 0.80  # "scales well": throughput at least 80 % of ideal
# "Input-bound": at least this share of the step waits for the next batch (docs/reports.md).
INPUT_BOUND_SHARE = 0.10
CI_COLUMNS = ["samples_per_s_low", "samples_per_s_high"]
# Scaling series: runs that differ only in worker count, every worker with the same resources
# (threads on a CPU, a GPU of its own: see `scaling_fairness`).
SCALING_KEY = [
    "machine",
    "workload",
    "per_worker_batch",
    "precision",
    "device",
    "sync_label",
    "resources",
]
# Rules that bring their own base LR and schedule (the recipe keys below) to a study.
OWN_RECIPE_RULES = tuple(name for name, rule in RULES.items() if rule.own_recipe)
RECIPE_KEYS = ["base_lr", "schedule"]
# Columns the convergence analysis reads beyond the summary's (empty in older results).
STUDY_COLUMNS = [
    "total_steps",
    "grad_noise_scale.pooled",
    "grad_noise_scale.method",
    "config.lr_rule.peak_lr",
    "eval_split",
    "final_test_acc",
]
STOP_AT_TARGET = "config.train.stop_at_target"
# Convergence groups: runs of one training recipe that differ in global batch and LR rule; a
# steps-to-target study (runs stop at the target) never mixes with a fixed-budget one.
CONVERGENCE_KEY = [
    "machine",
    "workload",
    "train_samples",
    "epochs",
    "base_lr",
    "base_batch",
    "schedule",
    "precision",
    "sync_label",
    "stops_at_target",
]
# Runs of one group that agree on these train identically whatever their rule is called: every
# rule at the base batch (k = 1) is the small-batch recipe.
TRAJECTORY_KEY = ["global_batch", "seed", "peak_lr", "warmup_epochs", "schedule", "base_lr"]


@dataclass
class ResultsTree:
    """One results directory as the report sees it."""

    source: Path
    runs: pd.DataFrame
    # run id -> frame: a `RunFrames` once read (frames cut from the bulk parse when asked for)
    epochs: MutableMapping[str, pd.DataFrame] = field(default_factory=dict)
    steps: MutableMapping[str, pd.DataFrame] = field(default_factory=dict)
    rank_steps: dict[str, pd.DataFrame] = field(default_factory=dict)  # runs that have one
    comm: pd.DataFrame = field(default_factory=pd.DataFrame)
    inputs: pd.DataFrame = field(default_factory=pd.DataFrame)  # input-bench rows
    warnings: list[str] = field(default_factory=list)
    units: dict[str, Any] = field(default_factory=dict)  # the attrs results.load gave the runs


def check_results_dir(path: str | Path) -> Path:
    """The directory as a Path, or a UserError saying why it cannot be read."""
    root = Path(path)
    if not root.exists():
        raise UserError(f"results directory not found: {root}")
    if not root.is_dir():
        raise UserError(f"not a directory: {root}")
    if not os.access(root, os.R_OK | os.X_OK):
        raise UserError(f"results directory is not readable: {root}")
    return root


def load_tree(path: str | Path) -> ResultsTree:
    """Read every run (with its CSVs) and every comm-bench result below ``path``."""
    root = check_results_dir(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with shared_walk(root, ("run.json", COMM_BENCH_JSON, INPUT_BENCH_JSON)):
            runs = results.load(root)
            comm = results.load_comm_bench(root)
            inputs = results.load_input_bench(root)
    notes = [str(w.message) for w in caught if w.category is UserWarning]  # not library noise
    if runs.empty and comm.empty and inputs.empty:
        nothing = "no run.json, comm_bench.json or input_bench.json"
        found = f"{len(notes)} left out: {notes[0]}" if notes else nothing
        raise UserError(f"no results to report in {root} ({found})")
    # Units and meanings ride beside the runs, not in their attrs: pandas deep-copies attrs on
    # nearly every operation, thousands of times over a large tree.
    units, runs.attrs = runs.attrs, {}
    runs = tidy_runs(runs)
    tree = ResultsTree(source=root, runs=runs, comm=tidy_comm(comm), warnings=notes, units=units)
    if not inputs.empty:
        inputs["machine"] = inputs.apply(machine_label, axis=1)
        tree.inputs = inputs
    read_run_csvs(tree)
    tree.runs = add_divergence_points(tree.runs, tree.epochs)
    hide_synthetic_accuracy(tree)
    return tree


# What a run's accuracy shows; on random inputs (synthetic_data) none of it means anything.
ACCURACY_COLUMNS = (
    "final_eval_acc",
    "best_eval_acc",
    "steps_to_target",
    "epochs_to_target",
    "last_finite_acc",
)


def on_synthetic_data(runs: pd.DataFrame) -> pd.Series:
    """Which runs trained on random inputs (records without the flag: none of them did)."""
    if "synthetic_data" not in runs:
        return pd.Series(False, index=runs.index)
    return runs["synthetic_data"].eq(True)


def hide_synthetic_accuracy(tree: ResultsTree) -> None:
    """Blank the accuracy of runs on synthetic data, so that no table, plot or finding uses it
    (the report says so once: `synthetic_note`)."""
    synthetic = on_synthetic_data(tree.runs)
    if not synthetic.any():
        return
    for col in ACCURACY_COLUMNS:
        if col in tree.runs:
            tree.runs[col] = tree.runs[col].astype(float).mask(synthetic)
    for run_id in tree.runs.loc[synthetic, "run_id"]:
        epochs = tree.epochs.get(run_id)
        if epochs is not None and "eval_acc" in epochs:
            tree.epochs[run_id] = epochs.assign(eval_acc=math.nan)


def synthetic_note(runs: pd.DataFrame) -> str | None:
    """One line naming the runs on synthetic data, or None when there are none."""
    synthetic = runs[on_synthetic_data(runs)]
    if synthetic.empty:
        return None
    workloads = ", ".join(sorted(synthetic["workload"].unique()))
    return (
        f"Synthetic data: accuracy not meaningful. {len(synthetic)} run(s) ({workloads}) "
        "trained on random inputs, as throughput benchmarks do; their accuracy is left out of "
        "every table, plot and finding."
    )


def read_run_csvs(tree: ResultsTree) -> None:
    """Every run's epochs.csv and steps.csv (each kind in one parse), and steps_by_rank.csv
    where a run has one; their warnings become report notes, run by run. Epochs carry their
    ``run_id`` (the report reads every run's at once); steps do not: a report reads them run by
    run, and a label on each of a large tree's million steps costs a third of a second."""
    dirs = [Path(run_dir) for run_dir in tree.runs["run_dir"]]
    ids = {"run_id": list(tree.runs["run_id"])}
    epochs, steps = results.epochs_of(dirs, ids), results.steps_of(dirs)
    tree.epochs = RunFrames(dict(zip(ids["run_id"], epochs, strict=True)))
    tree.steps = RunFrames(dict(zip(ids["run_id"], steps, strict=True)))
    for epoch_read, step_read in zip(epochs, steps, strict=True):
        tree.warnings.extend([*epoch_read.notes, *step_read.notes])
    by_rank = results.rank_steps_of(dirs)
    for run_id, run_dir in zip(tree.runs["run_id"], dirs, strict=True):
        read = by_rank.get(run_dir)
        if read is not None and not read.empty:
            tree.rank_steps[run_id] = read.frame
        tree.warnings.extend(read.notes if read is not None else [])


def machine_label(row: pd.Series) -> str:
    """The machine a run ran on: its hardware tag, or host and fingerprint when untagged."""
    tag = row.get("hardware.tag")
    if isinstance(tag, str) and tag.strip():
        return tag.strip()
    mid, host = row.get("hardware.machine_id"), row.get("hardware.hostname")
    mid = mid if isinstance(mid, str) and mid else None
    host = host if isinstance(host, str) and host else None
    if host and mid:
        return f"{host} ({mid})"
    return host or mid or "unknown machine"


def tidy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Every contract column present, numbers as numbers, and a ``machine`` label."""
    runs = runs.copy()
    if "grad_noise_scale" in runs.columns and runs["grad_noise_scale"].isna().all():
        # the null a run writes when it does not measure the noise scale (measured: dotted names)
        runs = runs.drop(columns="grad_noise_scale")
    for col in [*RUN_COLUMNS, *STUDY_COLUMNS]:
        if col not in runs.columns:
            runs[col] = None
    numeric = ["total_steps", "grad_noise_scale.pooled", "config.lr_rule.peak_lr", "final_test_acc"]
    for col in [*NUMERIC_COLUMNS, *numeric]:
        runs[col] = pd.to_numeric(runs[col], errors="coerce")
    for col in ("workload", "mode", "lr_rule", "precision", "device", "schedule"):
        runs[col] = runs[col].fillna("?").astype(str)
    # Runs from before synchronization strategies were recorded all used all-reduce.
    runs["sync"] = runs["sync"].fillna("allreduce").astype(str)
    runs["sync_label"] = runs["sync_label"].fillna(runs["sync"]).astype(str)
    runs["machine"] = runs.apply(machine_label, axis=1) if not runs.empty else []
    stops = runs[STOP_AT_TARGET] if STOP_AT_TARGET in runs.columns else pd.Series(False, runs.index)
    runs["stops_at_target"] = stops.eq(True)
    # More worker threads than cores: the timings measure contention (records before the
    # fingerprint had the flag read as not oversubscribed).
    runs["oversubscribed"] = runs["hardware.oversubscribed"].eq(True)
    return runs


def tidy_comm(comm: pd.DataFrame) -> pd.DataFrame:
    if comm.empty:
        return comm
    comm = comm.copy()
    numeric = results.schema.numeric(results.schema.COMM_BENCH_ROWS)
    for col in [*numeric, "world_size"]:  # world_size: comm_bench.json's, on every row
        comm[col] = pd.to_numeric(comm[col], errors="coerce")
    comm["machine"] = comm.apply(machine_label, axis=1)
    if "collective" not in comm.columns:
        comm["collective"] = "all_reduce"
    return comm.dropna(subset=numeric)


def collectives_label(comm: pd.DataFrame) -> str:
    """'All-reduce' for all-reduce benchmarks alone, else 'Collective'."""
    return "All-reduce" if set(comm["collective"]) == {"all_reduce"} else "Collective"


def add_divergence_points(
    runs: pd.DataFrame, epochs: MutableMapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """Where each run's last finite evaluation was: the point a diverged run is drawn at."""
    runs = runs.copy()
    # every run's rows at once: a loop over thousands of runs' frames costs seconds
    rows = epochs.rows() if isinstance(epochs, RunFrames) else stacked(epochs)
    if len(rows):
        finite = np.isfinite(rows["eval_loss"].to_numpy()) & np.isfinite(
            rows["eval_acc"].to_numpy()
        )
        last = rows[finite].drop_duplicates("run_id", keep="last")
    else:
        last = pd.DataFrame(columns=["run_id", "epoch", "eval_acc"])
    for column, name in (("last_finite_epoch", "epoch"), ("last_finite_acc", "eval_acc")):
        # numpy scalars, run by run: the column's type is what the runs' own values make it
        value_of = dict(zip(last["run_id"], last[name].to_numpy(), strict=True))
        runs[column] = [value_of.get(run_id, math.nan) for run_id in runs["run_id"]]
    return runs


# ---- scaling -----------------------------------------------------------------------------------


def scaling_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a scaling series is made of: complete DDP runs that measured a throughput, each
    with its ``resources`` per worker and why it counted more samples than it had, if it did."""
    if "sync_label" not in runs.columns:  # a frame not read through tidy_runs
        runs = runs.assign(sync_label="allreduce")
    if "oversubscribed" not in runs.columns:
        runs = runs.assign(oversubscribed=False)
    ok = runs[
        (runs["mode"] == "ddp")
        & (runs["status"] == "complete")
        & (runs["samples_per_s"] > 0)
        & (runs["workers"] >= 1)
    ].copy()  # one block: results frames are wide
    return ok.assign(
        resources=scaling_fairness.resources_per_worker(ok),
        samples_short=scaling_validity.sample_shortfall(ok),
    )


def mixed_resources(runs: pd.DataFrame) -> list[str]:
    """A finding per would-be scaling series whose points ran with different resources per
    worker (see `scaling_fairness`): the report never divides one by the other."""
    ok = scaling_runs(runs)
    key = [k for k in SCALING_KEY if k != "resources"]
    mixed = scaling_fairness.mixed_series(ok, key)
    if not mixed:
        return []
    # labelled as the series are: naming what tells them apart in these results
    heads = ok[key].drop_duplicates()
    labels = dict(
        zip(
            map(_hashable, heads.to_numpy()),
            series_labels(heads, key, ["workload", "per_worker_batch"]),
            strict=True,
        )
    )
    return [
        scaling_fairness.mixed_finding(labels[_hashable(values)], by_resources)
        for values, by_resources in mixed
    ]


def _hashable(values) -> tuple:
    """Key values that compare equal where missing (NaN is not equal to itself)."""
    return tuple(None if pd.isna(v) else v for v in values)


def scaling_table(
    runs: pd.DataFrame, always: tuple[str, ...] = ("workload", "per_worker_batch")
) -> pd.DataFrame:
    """Per scaling series and worker count: median throughput, step-time parts and efficiency.

    A series is the complete DDP runs of one machine, workload and per-worker batch whose
    workers all had the same resources (`scaling_fairness`); it counts when it holds at least
    two worker counts. Repeated runs of a point give its median and the bootstrap interval of
    that median (``samples_per_s_low``, ``samples_per_s_high``); a point is ``oversubscribed``
    when any of its runs had more worker threads than cores. Efficiency is
    tput(N) / (N/N0 · tput(N0)), with N0 the smallest worker count measured (1 in a normal
    sweep), with the bootstrap interval of that ratio over the repeats (``efficiency_low``,
    ``efficiency_high``); ``invalid`` says why a point cannot be true (`scaling_validity`).
    Legend labels name the key parts that differ between series, plus ``always``.
    """
    ok = scaling_runs(runs)
    if ok.empty:
        return pd.DataFrame()
    parts = [
        "samples_per_s",
        "step_time_s",
        "compute_time_s",
        "comm_time_s",
        "exposed_comm_s",
    ]
    # Shown where the runs have them: tokens/s, model FLOP/s and MFU, peak memory.
    parts += [c for c in EXTRA_SCALING_COLUMNS if c in ok.columns]
    points = ok.groupby([*SCALING_KEY, "workers"], dropna=False)
    ci = points["samples_per_s"].apply(lambda s: pd.Series(stats.median_ci(s), index=CI_COLUMNS))
    table = (
        points[parts]
        .median()
        .join(points.size().rename("runs"))
        .join(points["oversubscribed"].any())
        .join(points["samples_short"].max())
        .join(points["samples_per_s"].apply(tuple).rename("measured"))
        .join(ci.unstack())
        .reset_index()
    )
    series = [
        with_efficiency(grp)
        for _, grp in table.groupby(SCALING_KEY, dropna=False, sort=True)
        if grp["workers"].nunique() >= 2
    ]
    if not series:
        return pd.DataFrame()
    out = pd.concat(series, ignore_index=True).drop(columns="measured")
    out["series"] = series_labels(out, SCALING_KEY, list(always))
    shown = shown_parts(out, SCALING_KEY, list(always))
    out["series_title"] = " · ".join(COLUMN_NAMES[c] for c in shown)
    return scaling_validity.judge(out)


def with_efficiency(grp: pd.DataFrame) -> pd.DataFrame:
    """One series' ideal line and efficiency against its smallest worker count, with the
    interval of each efficiency over the repeats (none at the baseline, or with one run)."""
    grp = grp.sort_values("workers").copy()
    base = grp.iloc[0]
    grp["base_workers"] = int(base["workers"])
    ideal = base["samples_per_s"] * grp["workers"] / base["workers"]
    grp["ideal_samples_per_s"] = ideal
    grp["efficiency"] = grp["samples_per_s"] / ideal
    bounds = [
        stats.ratio_ci(base["measured"], row["measured"]) if i else (math.nan, math.nan)
        for i, (_, row) in enumerate(grp.iterrows())
    ]
    scale = (base["workers"] / grp["workers"]).to_numpy(float)
    grp["efficiency_low"] = np.array([lo for lo, _ in bounds]) * scale
    grp["efficiency_high"] = np.array([hi for _, hi in bounds]) * scale
    return grp


EXTRA_SCALING_COLUMNS = (
    "tokens_per_s",
    "model_tflops_per_device",
    "mfu",
    "peak_rss_mib",
    "peak_cuda_allocated_mib",
    "straggler_wait_s",
    "data_wait_s",
    "data_wait_share",
)

COLUMN_NAMES = {
    "machine": "machine",
    "workload": "workload",
    "per_worker_batch": "per-worker batch",
    "precision": "precision",
    "device": "device",
    "epochs": "epochs",
    "train_samples": "training samples",
    "base_lr": "base LR",
    "base_batch": "base batch",
    "schedule": "schedule",
    "sync_label": "synchronization",
    "stops_at_target": "study",
    "resources": "resources per worker",
}


def shown_parts(frame: pd.DataFrame, key: list[str], always: list[str]) -> list[str]:
    """The key columns a label names: those that tell series apart, plus ``always``."""
    return [c for c in key if c in always or frame[c].nunique(dropna=False) > 1]


def series_labels(frame: pd.DataFrame, key: list[str], always: list[str]) -> list[str]:
    """Legend labels naming the key parts that tell the series apart (plus ``always``)."""
    shown = shown_parts(frame, key, always)
    if not shown:
        return [""] * len(frame)
    # column by column, each value as a row of the frame holds it: a row Series per run of a
    # wide frame costs more than its label
    values = [frame[c].to_numpy(dtype=object) for c in shown]
    return [" · ".join(map(describe, shown, row)) for row in zip(*values, strict=True)]


def describe(column: str, value) -> str:
    if column == "per_worker_batch":
        return f"{int(value)}/worker"
    if pd.isna(value):
        return f"{COLUMN_NAMES.get(column, column)} ?"
    if column == "epochs":
        return f"{value:g} epochs"
    if column == "train_samples":
        return f"{int(value)} training samples"
    if column == "base_lr":
        return f"base LR {value:g}"
    if column == "base_batch":
        return f"base batch {int(value)}"
    if column == "stops_at_target":
        return "steps to target" if value else "fixed budget"
    return str(value)


# ---- convergence -------------------------------------------------------------------------------


def convergence_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Complete and diverged runs that belong to a convergence group, with a ``group`` label.

    A group (one machine, workload, epoch budget and precision) counts when it spans at least two
    global batches and either two LR rules or simulated workers: a plain scaling sweep (one rule,
    real workers) is not a convergence study. A rule with its own base LR and schedule (lars)
    joins the group it shares everything else with, so that all rules meet on one figure.
    """
    done = runs[runs["status"].isin(["complete", "diverged"]) & (runs["global_batch"] >= 1)]
    done = done[~on_synthetic_data(done)]  # random inputs: nothing to learn, no study
    own = done["lr_rule"].isin(OWN_RECIPE_RULES)
    shared = [k for k in CONVERGENCE_KEY if k not in RECIPE_KEYS]
    main = _study_groups(done[~own])
    joined, alone = pd.DataFrame(), done[own]
    if main and own.any():
        recipes = pd.concat(main)[shared].drop_duplicates()
        matched = done[own].merge(recipes, on=shared, how="left", indicator=True)
        joined = matched[matched["_merge"] == "both"].drop(columns="_merge")
        alone = matched[matched["_merge"] == "left_only"].drop(columns="_merge")
    groups = main + _study_groups(alone)
    if not groups:
        return pd.DataFrame()
    out = pd.concat(groups, ignore_index=True)
    out["group"] = series_labels(out, CONVERGENCE_KEY, always=["workload"])
    if not joined.empty:  # labelled like the group whose recipe they join
        labels = out[shared + ["group"]].drop_duplicates(shared)
        out = pd.concat([out, joined.merge(labels, on=shared)], ignore_index=True)
    return out


def _study_groups(done: pd.DataFrame) -> list[pd.DataFrame]:
    keep = []
    for _, grp in done.groupby(CONVERGENCE_KEY, dropna=False, sort=True):
        study = grp["lr_rule"].nunique() >= 2 or (grp["mode"] == "simulated").any()
        if grp["global_batch"].nunique() >= 2 and study:
            keep.append(grp)
    return keep


def rule_order(rules) -> list[str]:
    """LR rules in the registry's order, unknown ones last."""
    known = [r for r in RULE_ORDER if r in set(rules)]
    return known + sorted(set(rules) - set(RULE_ORDER))


def accuracy_table(conv: pd.DataFrame) -> pd.DataFrame:
    """Per group, rule and global batch: final accuracy over the completed seeds (their mean,
    median (see `seed_split.median`) and each seed's, ``acc_seeds``), and divergence."""
    rows = []
    key = ["group", "lr_rule", "global_batch"]
    narrow = conv[[*key, "status", "final_eval_acc"]]  # a group of a wide frame copies it all
    for (group, rule, batch), grp in narrow.groupby(key):
        done = grp[grp["status"] == "complete"]["final_eval_acc"].dropna()
        rows.append(
            {
                "group": group,
                "lr_rule": rule,
                "global_batch": int(batch),
                "acc_mean": done.mean() if len(done) else math.nan,
                "acc_median": seed_split.median(done),
                "acc_seeds": tuple(float(a) for a in done),
                "acc_std": done.std(ddof=1) if len(done) > 1 else 0.0,
                "seeds": len(done),
                "diverged": int((grp["status"] == "diverged").sum()),
                "runs": len(grp),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Baseline:
    batch: int
    # median final accuracy (fraction) of the distinct completed runs at the smallest batch
    acc: float
    std: float
    runs: int  # distinct runs (trajectories) the median is over
    shared: int = 0  # further runs that repeated one of those trajectories under another rule


def distinct_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per trajectory (see ``TRAJECTORY_KEY``): a rule that trains the very run another
    rule trained adds no evidence, so statistics count it once. Runs that lack a key column's
    value are kept as they are."""
    known = runs[TRAJECTORY_KEY].notna().all(axis=1)
    unique = runs[known].drop_duplicates(TRAJECTORY_KEY)
    return pd.concat([unique, runs[~known]]).sort_index()


def baseline(conv_group: pd.DataFrame) -> Baseline | None:
    """The small-batch reference: the completed runs at the group's smallest global batch, each
    trajectory once."""
    smallest = conv_group["global_batch"].min()
    at = conv_group[(conv_group["global_batch"] == smallest) & (conv_group["status"] == "complete")]
    if (~at["lr_rule"].isin(OWN_RECIPE_RULES)).any():  # the recipe's own small-batch accuracy
        at = at[~at["lr_rule"].isin(OWN_RECIPE_RULES)]
    at = at[at["final_eval_acc"].notna()]
    distinct = distinct_runs(at)
    accs = distinct["final_eval_acc"]
    if accs.empty:
        return None
    std = float(accs.std(ddof=1)) if len(accs) > 1 else 0.0
    return Baseline(int(smallest), seed_split.median(accs), std, len(accs), len(at) - len(distinct))


def curve_batches(conv_group: pd.DataFrame, most: int = 3) -> list[int]:
    """A few global batches to show training curves at: smallest, largest and one between."""
    batches = sorted(int(b) for b in conv_group["global_batch"].unique())
    if len(batches) <= most:
        return batches
    picks = {batches[0], batches[-1]}
    for i in range(1, most - 1):
        target = math.exp(
            math.log(batches[0]) + i * (math.log(batches[-1]) - math.log(batches[0])) / (most - 1)
        )
        picks.add(min(batches, key=lambda b: abs(math.log(b) - math.log(target))))
    return sorted(picks)


def one_run_per(conv_group: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The lowest-seed run for each combination of ``keys`` (for curves, where seeds don't mix)."""
    ordered = conv_group.sort_values(["seed", "run_id"])
    return ordered.drop_duplicates(keys).reset_index(drop=True)  # whole rows, never mixed


def lr_batch(conv_group: pd.DataFrame) -> int:
    """The large batch to draw LR schedules at: the largest one run under the most rules."""
    rules_per_batch = conv_group.groupby("global_batch")["lr_rule"].nunique()
    best = rules_per_batch.max()
    return int(max(b for b, n in rules_per_batch.items() if n == best))


def lr_series(tree: ResultsTree, run_id: str) -> pd.DataFrame:
    """A run's LR by step: steps.csv (sampled, timing warm-up excluded) merged with epochs.csv."""
    parts = [
        frame[["step", "lr"]]
        for frame in (tree.steps.get(run_id), tree.epochs.get(run_id))
        if frame is not None and len(frame)
    ]
    if not parts:
        return pd.DataFrame(columns=["step", "lr"])
    merged = pd.concat(parts).dropna().drop_duplicates("step").sort_values("step")
    return merged.reset_index(drop=True)


# ---- runs that produced no result --------------------------------------------------------------


def unfinished_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Failed runs (and runs still in progress): listed in a table, never plotted."""
    cols = ["run_id", "status", "workload", "mode", "workers", "global_batch", "lr_rule", "error"]
    bad = runs[runs["status"].isin(["failed", "running"])]
    return bad[cols].sort_values(["status", "run_id"]).reset_index(drop=True)


def summary_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """summary.csv: one row per run, contract columns first."""
    first = ["machine", *RUN_COLUMNS, "last_finite_epoch", "last_finite_acc"]
    rest = sorted(c for c in runs.columns if c not in first)
    return runs[[c for c in first if c in runs.columns] + rest].sort_values("run_id")


def shared_units(trees: list[ResultsTree]) -> dict[str, Any]:
    """The units of runs read from several trees: those of every tree when they are all the
    same, else none (as pandas keeps attrs through a concat)."""
    if not trees or not all(t.units for t in trees):
        return {}
    return trees[0].units if all(t.units == trees[0].units for t in trees[1:]) else {}


def write_summary(summary: pd.DataFrame, out: Path, units: dict[str, Any] | None = None) -> None:
    """summary.csv, and summary.parquet beside it where pyarrow is installed (the `parquet`
    extra): the same frame, with types kept (and each column's unit: ``units``, the attrs the
    runs were loaded with, are kept in the file's pandas metadata)."""
    iso = {  # timestamps as run.json writes them (ISO 8601), not pandas' spelling
        c: summary[c].map(lambda t: t.isoformat() if pd.notna(t) else None)
        for c in summary.columns
        if isinstance(summary[c].dtype, pd.DatetimeTZDtype)
    }
    owned.write(out / "summary.csv", summary.assign(**iso).to_csv(index=False))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return
    from dpsuite.results.export.parquet_files import write_frame

    if units:
        summary = summary.copy(deep=False)
        summary.attrs = units
    write_frame(summary, out / "summary.parquet")
