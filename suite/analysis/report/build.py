"""`dpsuite report`: one results tree -> index.html, index.md, one PNG per plot, summary.csv
(and summary.parquet with pyarrow)."""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.analysis import scaling
from suite.analysis.report import critical_batch as cb
from suite.analysis.report import (
    data,
    findings,
    headline,
    plots,
    render,
    strategies,
    studies,
)
from suite.analysis.report import time_to_target as ttt
from suite.errors import UserError
from suite.results import owned

# The names of the plots a report can write.
PLOT_NAMES = (
    "throughput",
    "efficiency",
    "step_time_breakdown",
    "allreduce_bandwidth",
    "accuracy_vs_batch",
    "training_curves",
    "steps_to_target",
    "rule_efficiency",
    "time_to_target",
    "lr_schedule",
    "sync_throughput",
    "sync_bytes",
    "sync_tradeoff",
    "scaling_model",
    "gradient_noise_scale",
    "critical_batch",
)
REFERENCE_RESULTS = Path("results/reference")


@dataclass
class Written:
    out: Path
    warnings: list[str]
    headline: list[str] = field(default_factory=list)


def default_out(results_dir: str | Path) -> Path:
    return Path("reports") / Path(results_dir).resolve().name


def prepare_out(out: Path) -> Path:
    """Create the output directory; what an earlier report wrote there and this one does not
    is removed at the end by its manifest (``suite.results.owned``), nothing else."""
    try:
        return owned.begin(out)
    except owned.OutputWriteError as exc:
        raise UserError(f"cannot write the report to {out}: {exc.reason}") from None


def display_path(path: Path) -> str:
    """The path as the user would type it: relative when below the working directory."""
    full = path.resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class FigureWriter:
    """Saves figures into the report directory and remembers them for the page."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.figures: list[render.Figure] = []

    def add(self, name: str, fig, title: str, caption: str) -> None:
        if fig is None:
            return
        file = f"{name}.png"
        plots.save(fig, self.out / file)
        self.figures.append(render.Figure(file=file, title=title, caption=caption))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def machines_lines(
    runs: pd.DataFrame, comm: pd.DataFrame, order: list[str] | None = None
) -> list[str]:
    """One line per machine (by name, or in ``order``): what it is, from its fingerprint."""
    frames = [f for f in (runs, comm) if not f.empty and "machine" in f.columns]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    lines = []
    groups = dict(list(rows.groupby("machine", sort=True))) if len(rows) else {}
    for machine in order or list(groups):
        first = groups[machine].iloc[0]

        def get(key: str, row=first):
            value = row.get(f"hardware.{key}")
            return None if value is None or (isinstance(value, float) and pd.isna(value)) else value

        cores = get("cpu_count")
        cores = f"{cores:g}" if isinstance(cores, numbers.Real) else "?"
        parts = [f"{get('cpu') or 'unknown CPU'} ({cores} cores)"]
        accel = get("accelerator")
        if accel and accel != "none":
            parts.append(f"{get('accelerator_count') or '?'} × {accel}")
        for key in ("backend", "torch"):
            if get(key):
                parts.append(f"{key} {get(key)}")
        lines.append(f"Machine `{machine}`: " + ", ".join(parts))
    return lines


def status_line(tree: data.ResultsTree) -> str:
    counts = tree.runs["status"].value_counts() if not tree.runs.empty else pd.Series(dtype=int)
    parts = [f"{n} {s}" for s, n in counts.items()]
    benches = tree.comm["bench_id"].nunique() if not tree.comm.empty else 0
    runs = plural(len(tree.runs), "run") + (f" ({', '.join(parts)})" if parts else "")
    benches = plural(benches, "all-reduce benchmark")
    return f"Results: `{display_path(tree.source)}`: {runs}, {benches}."


# ---- sections ---------------------------------------------------------------------------------


def scaling_section(
    tree: data.ResultsTree, scaling: pd.DataFrame, figs: FigureWriter, report: render.Report
) -> None:
    if scaling.empty:
        return
    base = int(scaling["base_workers"].min())
    counts = scaling.groupby("series")["runs"].sum()
    figs.add(
        "throughput",
        plots.throughput_vs_workers(scaling),
        "Throughput vs workers",
        f"One panel per workload. Median measured samples/s of the complete DDP runs at each "
        f"worker count ({int(counts.sum())} runs; bars: 95 % bootstrap interval where a point "
        f"was repeated); dashed: ideal linear scaling from N={base}; hollow: oversubscribed "
        "(more worker threads than cores: the point measures contention).",
    )
    figs.add(
        "efficiency",
        plots.efficiency_vs_workers(scaling),
        "Scaling efficiency vs workers",
        f"Throughput at N workers divided by N/{base} × the throughput at N={base}, one panel "
        "per workload. 100 % is perfect scaling; the dotted line marks 80 %; hollow: "
        "oversubscribed.",
    )
    figs.add(
        "step_time_breakdown",
        plots.step_time_breakdown(scaling),
        "Step-time breakdown",
        "Median step time split into compute (the step without gradient synchronisation), "
        "exposed communication (the time the all-reduce adds) and the rest, one panel per "
        "series; the black tick is the total all-reduce time, part of which overlaps the "
        "backward pass; hatched: oversubscribed.",
    )
    report.findings += findings.scaling_findings(scaling)
    report.tables.append(
        render.Table(
            "Scaling",
            scaling_table_for_report(scaling),
            "Medians over the runs of each point; 95 % CI: bootstrap interval of the median "
            "samples/s over repeated runs. Model TFLOP/s per device: FLOPs counted by PyTorch x "
            "samples/s per device; MFU against hardware.peak_tflops where given; peak RSS: the "
            "largest rank's resident memory. oversubscribed: more worker threads than cores, "
            "so the point measures contention.",
        )
    )


def interval_text(low: float, high: float) -> str:
    return "" if pd.isna(low) or pd.isna(high) else f"{low:,.0f}–{high:,.0f}"


def scaling_table_for_report(scaling: pd.DataFrame) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "series": scaling["series"],
            "workers": scaling["workers"],
            "runs": scaling["runs"],
            "samples_per_s": scaling["samples_per_s"],
            "samples_per_s_95%_CI": [
                interval_text(lo, hi)
                for lo, hi in zip(
                    scaling["samples_per_s_low"], scaling["samples_per_s_high"], strict=True
                )
            ],
            "efficiency_pct": 100 * scaling["efficiency"],
            "step_time_ms": 1e3 * scaling["step_time_s"],
            "compute_ms": 1e3 * scaling["compute_time_s"],
            "exposed_comm_ms": 1e3 * scaling["exposed_comm_s"],
            "comm_ms": 1e3 * scaling["comm_time_s"],
            "tokens_per_s": scaling.get("tokens_per_s"),
            "model_TFLOP/s_per_device": scaling.get("model_tflops_per_device"),
            "MFU_pct": 100 * scaling["mfu"] if "mfu" in scaling else None,
            "peak_RSS_MiB": scaling.get("peak_rss_mib"),
            "peak_CUDA_MiB": scaling.get("peak_cuda_allocated_mib"),
            "oversubscribed": scaling["oversubscribed"].map({True: "yes", False: ""}),
        }
    )
    if not scaling["samples_per_s_low"].notna().any():
        table = table.drop(columns="samples_per_s_95%_CI")
    if not scaling["oversubscribed"].any():
        table = table.drop(columns="oversubscribed")
    return table.dropna(axis=1, how="all")


def model_section(fits: list[scaling.Fit], figs: FigureWriter, report: render.Report) -> None:
    """The scaling model fitted to these results, beside the measured points."""
    curves, validation = [], []
    machines = len({fit.hardware for fit in fits})
    for fit in fits:
        if fit.validation.empty:
            continue
        for batch in sorted(fit.validation["per_worker_batch"].unique()):
            label = f"{fit.workload}, b={batch}" + (f" ({fit.hardware})" if machines > 1 else "")
            curves.append(
                fit.model.predict(scaling.DEFAULT_WORKERS, int(batch)).assign(series=label)
            )
            val = fit.validation[fit.validation["per_worker_batch"] == batch]
            validation.append(
                val.assign(
                    series=label, samples_per_s=val["workers"] * batch / val["measured_step_s"]
                )
            )
    if not curves:
        return
    table = pd.concat(validation, ignore_index=True)
    # Two decimals: a fit that passes through a point leaves a rounding residue (1e-14) whose
    # digits differ between CPUs, and the report must not.
    table["error_pct"] = table["error_pct"].round(2) + 0.0
    validated = sorted({fit.model.validated_max for fit in fits})
    one_node = all(fit.model.topology.nodes(max(scaling.DEFAULT_WORKERS)) == 1 for fit in fits)
    figs.add(
        "scaling_model",
        plots.model_vs_measured(pd.concat(curves), table),
        "Scaling model: predicted vs measured throughput",
        "Step time = compute (workers=1 runs, linear in batch) + the all-reduce time DDP's bucket "
        "schedule leaves exposed after the backward pass (fastest of ring, tree and hierarchical "
        "all-reduce on the links fitted to comm-bench); throughput = N × b / step time. "
        f"Validated against measurements up to {' / '.join(map(str, validated))} workers "
        "(runs with more worker threads than cores left out): solid there, dashed and labelled "
        "extrapolation beyond"
        + (
            "; no comm-bench spanned two nodes, so the extrapolation keeps every rank on the "
            "link measured inside this one."
            if one_node
            else "."
        )
        + " `dpsuite predict` prints the fitted parameters.",
    )
    report.findings += findings.model_findings(table)
    report.tables.append(
        render.Table(
            "Scaling model validation",
            table[["series", "workers", "measured_step_s", "predicted_step_s", "error_pct"]],
            "Predicted against measured median step time at every measured worker count.",
        )
    )


def comm_section(tree: data.ResultsTree, figs: FigureWriter, report: render.Report) -> None:
    if tree.comm.empty:
        return
    figs.add(
        "allreduce_bandwidth",
        plots.allreduce_bandwidth(tree.comm),
        f"{data.collectives_label(tree.comm)} bandwidth vs message size",
        "From `dpsuite comm-bench` (nccl-tests definitions): algbw = bytes / time; "
        "busbw = algbw × the collective's factor (all-reduce 2(n−1)/n; all-gather, "
        "reduce-scatter, all-to-all (n−1)/n; broadcast 1), the per-link rate, comparable "
        "across rank counts.",
    )
    report.findings += findings.comm_bench_findings(tree.comm)


def convergence_section(
    tree: data.ResultsTree, figs: FigureWriter, report: render.Report, accuracy: studies.Groups
) -> None:
    """Each accuracy study (see `studies`) and one table of them all."""
    if not accuracy:
        return
    for label, group in accuracy:
        named = (f"-{slug(label)}", f" ({label})") if len(accuracy) > 1 else ("", "")
        sentences = accuracy_section(tree, group, *named, figs)
        report.findings += [f"{label}: {s}" if len(accuracy) > 1 else s for s in sentences]
    acc = data.accuracy_table(pd.concat([group for _, group in accuracy]))
    table = acc.assign(
        acc_mean_pct=100 * acc["acc_mean"], acc_std_points=100 * acc["acc_std"]
    ).sort_values(["group", "lr_rule", "global_batch"])
    cols = [
        "group",
        "lr_rule",
        "global_batch",
        "acc_mean_pct",
        "acc_std_points",
        "seeds",
        "diverged",
    ]
    if acc["group"].nunique() == 1:
        cols.remove("group")
    report.tables.append(render.Table("Final accuracy by LR rule and global batch", table[cols]))


def accuracy_section(
    tree: data.ResultsTree, group: pd.DataFrame, suffix: str, about: str, figs: FigureWriter
) -> list[str]:
    """Final accuracy against global batch under each rule, its training curves and LRs."""
    acc = data.accuracy_table(group)
    base = data.baseline(group)
    seeds = int(acc["seeds"].max()) if len(acc) else 0
    epochs = group["epochs"].dropna()
    budget = f", {epochs.iloc[0]:g} epochs at every batch" if len(epochs) else ""
    figs.add(
        f"accuracy_vs_batch{suffix}",
        plots.accuracy_vs_batch(group, acc, base, f"Final test accuracy vs global batch{about}"),
        f"Final accuracy vs global batch{about}",
        f"Mean final test accuracy per LR rule and global batch{budget}; "
        + (
            f"error bars: ± 1 standard deviation over up to {seeds} seeds. "
            if seeds > 1
            else "one seed per point (no error bars). "
        )
        + (
            f"Grey band: the batch-{base.batch} baseline ± 1 point (each run once: at that "
            "batch the rules train the same runs). "
            if base is not None
            else ""
        )
        + "×: a diverged run, drawn at its last finite evaluation.",
    )
    batches = data.curve_batches(group)
    figs.add(
        f"training_curves{suffix}",
        plots.training_curves(group, tree.epochs, batches, f"Test accuracy during training{about}"),
        f"Training curves{about}",
        f"Test accuracy at each evaluation, per LR rule, at global batches "
        f"{', '.join(map(str, batches))} (lowest seed). ×: the run diverged after this point.",
    )
    lr_section(tree, group, suffix, about, figs)
    return findings.convergence_findings(acc, base)


def target_sections(
    tree: data.ResultsTree,
    figs: FigureWriter,
    report: render.Report,
    targets: list[studies.TargetStudy],
) -> None:
    """Each steps-to-target study (see `studies`)."""
    for study in targets:
        named = (f"-{slug(study.label)}", f" ({study.label})") if len(targets) > 1 else ("", "")
        sentences = target_section(study, tree, *named, figs, report)
        report.findings += [f"{study.label}: {s}" if len(targets) > 1 else s for s in sentences]


def target_section(
    study: studies.TargetStudy,
    tree: data.ResultsTree,
    suffix: str,
    about: str,
    figs: FigureWriter,
    report: render.Report,
) -> list[str]:
    """Steps to target per rule and for the LR oracle, efficiency, knee and critical batch,
    time to target; their findings."""
    target = f"{100 * study.target:g} %"
    budget = f"{study.epochs:g}-epoch budget" if study.epochs else "budget"
    split = study.split
    fit = study.fit
    figs.add(
        f"steps_to_target{suffix}",
        plots.steps_to_target(
            study.rules,
            study.best,
            study.knee,
            study.target,
            f"Steps to {target}{about}",
            fit=fit,
            split=split,
        ),
        f"Steps to {target} {split} accuracy vs global batch{about}",
        f"Median over seeds of the optimizer steps until the {split} accuracy reached {target}"
        + (
            f" (the median of {reach_window(study)} consecutive evaluations, counted at the "
            "middle one)"
            if reach_window(study) > 1
            else " (first evaluation)"
        )
        + f", a seed that did not within the {budget} (or diverged) counting as never: "
        "the median is never (▲ at the top) where half the seeds or more missed. At the base "
        "batch every rule trains the same run at the base LR, counted once. Black: the LR "
        "oracle, the fewest steps over every LR tried at that batch (the rules and the "
        "`power` grid: absolute peak LRs, or base LR × (B/B0)^exponent, with warmup from the "
        "base LR; momentum fixed), the best-tuned curve of Shallue et al. 2018. Dashed: "
        "perfect scaling from the oracle's smallest batch (doubling the batch halves the "
        "steps)."
        + (
            f" Dotted purple: S(B) = S_min + E_min / B fitted to the oracle at "
            f"{', '.join(map(str, fit.batches))} (B_crit = E_min / S_min ≈ "
            f"{plots.approx(fit.b_crit)})."
            if fit is not None
            else ""
        ),
    )
    figs.add(
        f"rule_efficiency{suffix}",
        plots.rule_efficiency(study.efficiency, f"LR rules against the LR oracle{about}"),
        f"Efficiency of each LR rule against the LR oracle{about}",
        f"The oracle's steps to {target} divided by the rule's, per global batch: 100 % is "
        "as few steps as the best LR tried there; 0 % (▲): the rule's median never reaches "
        "the target.",
    )
    out = findings.target_findings(study)
    out += critical_batch_section(study, tree, suffix, about, figs)
    out += time_section(study, suffix, about, figs, report)
    report.tables.append(
        render.Table(
            f"LR oracle: fewest steps to {target} per global batch{about}", oracle_table(study)
        )
    )
    return out


def reach_window(study: studies.TargetStudy) -> int:
    """Evaluations whose median counts as reaching the target (1 in older results)."""
    window = pd.to_numeric(
        study.group.get("config.train.target_evals", pd.Series(dtype=float)), errors="coerce"
    ).dropna()
    return int(window.max()) if len(window) else 1


def oracle_table(study: studies.TargetStudy) -> pd.DataFrame:
    best = study.best
    perfect = [study.knee.perfect(b) if study.knee else None for b in best["global_batch"]]
    fitted = [study.fit.steps(b) if study.fit else None for b in best["global_batch"]]
    faster = set(study.faster["global_batch"])
    flags = [
        ", ".join(
            why
            for why, on in (
                ("too few LRs", row["too_few_lrs"]),
                ("best LR at the grid's edge", row["at_grid_edge"]),
                ("steps fall faster than perfect to 2B", row["global_batch"] in faster),
            )
            if on
        )
        for _, row in best.iterrows()
    ]
    return pd.DataFrame(
        {
            "global_batch": best["global_batch"],
            "steps": [findings.steps_text(s) for s in best["steps"]],
            "perfect_scaling_steps": perfect,
            "fitted_steps": fitted,
            "best_lr_setting": best["setting"].fillna(""),
            "peak_lr": best["peak_lr"],
            "seeds_reached": [
                f"{r} of {n}" for r, n in zip(best["reached"], best["seeds"], strict=True)
            ],
            "lr_settings_tried": best["tried"],
            "distinct_lrs": best["lrs"],
            "not_tuned": flags,
            "budget_steps": best["budget_steps"],
        }
    ).dropna(axis=1, how="all")


def critical_batch_section(
    study: studies.TargetStudy, tree: data.ResultsTree, suffix: str, about: str, figs: FigureWriter
) -> list[str]:
    """B_simple over training and the predicted vs found critical batch; their findings."""
    measured, prediction = study.trained.runs, study.prediction
    rule = cb.reference_rule(measured)
    left_out = study.trained.left_out
    how = cb.methods_text(measured)
    if rule is not None:
        figs.add(
            f"gradient_noise_scale{suffix}",
            plots.noise_scale_over_training(
                cb.noise_scale_curves(measured, tree.epochs, rule),
                rule,
                prediction.batch if prediction else None,
                f"Gradient noise scale during training{about}",
            ),
            f"Gradient noise scale B_simple over training (`{rule}`){about}",
            "B_simple = tr(Σ)/|G|² (McCandlish et al. 2018, App. A) from two batch sizes: "
            f"{how}. Both estimates are summed over a window of training steps before their "
            f"ratio is taken; each point is the latest window at an evaluation of the `{rule}` "
            "runs that trained, one line per global batch, mean over seeds; windows without a "
            "positive estimate are left out"
            + (
                f", and so are the {plural(left_out, 'run')} that {study.trained.reason}"
                if left_out
                else ""
            )
            + ". Dotted: the median of the runs' B_simple pooled from step 0 (secondary: the "
            "value near the target is in the critical-batch plot).",
        )
    fit, near = study.fit, study.near
    if study.knee is not None and (fit is not None or near is not None):
        figs.add(
            f"critical_batch{suffix}",
            plots.critical_batch(
                study.best,
                study.knee,
                fit,
                near,
                study.target,
                f"Critical batch: fitted vs predicted{about}",
                study.split,
            ),
            f"Critical batch: fitted to steps to target vs predicted from the noise scale{about}",
            "Black: the LR oracle's steps to target per global batch; dotted purple: S(B) = "
            "S_min + E_min / B fitted to them (least squares in relative error, censored and "
            "untuned batches left out), and its B_crit = E_min / S_min (purple line; band: 95 % "
            "bootstrap interval over seeds). Green: B_simple near the target, the median over "
            f"the LR oracle's runs of each run's B_simple pooled over the windows in the last "
            f"{100 * cb.NEAR_TARGET:g} % of its steps before the target (band: 95 % bootstrap "
            "interval of the median). Dashed: perfect scaling from the oracle's smallest batch "
            f"B0; grey dotted: {cb.KNEE_FACTOR:g}× that. The knee (★) is the first batch where "
            f"the steps leave {cb.KNEE_FACTOR:g}× perfect scaling, interpolated in log-log space "
            "(a shaded band where only its bracket is known); green dash-dot: where "
            "S = S_min (1 + B_noise/B) with B_noise the green value puts it, B_noise + "
            f"{cb.KNEE_FACTOR:g}·B0.",
        )
    return findings.critical_batch_findings(study)


def time_section(
    study: studies.TargetStudy, suffix: str, about: str, figs: FigureWriter, report: render.Report
) -> list[str]:
    """Time to target against workers, measured and predicted; its table and findings."""
    if study.times.empty:
        return []
    target = f"{100 * study.target:g} %"
    validated = (
        f" (validated up to {study.model.validated_max} workers)" if study.model is not None else ""
    )
    figs.add(
        f"time_to_target{suffix}",
        plots.time_to_target(
            ttt.fastest_per_workers(study.times),
            study.target,
            f"Time to {target}{about}",
            study.split,
        ),
        f"Time to {target} {study.split} accuracy vs workers{about}",
        f"Steps to {target} at global batch N·b (seed median) × the step time of N workers "
        "of per-worker batch b: training steps only. Filled circles: the step time measured "
        "by this machine's scaling runs (median) with no more worker threads than cores, "
        "joined by solid lines; hollow squares: measured, but oversubscribed (contention, not "
        "scaling: never counted as measured); hollow circles: predicted by the scaling model "
        "fitted to "
        f"them{validated}. At each worker count the per-worker batch (of those the scaling "
        "runs measured) that reaches the target soonest; black: at the LR oracle's best LR "
        "per batch, colours: each rule.",
    )
    order = {ttt.MEASURED: 0, ttt.OVERSUBSCRIBED: 1, ttt.MODEL: 2}
    times = study.times.sort_values(
        ["source", "curve", "workers", "per_worker_batch"],
        key=lambda col: col.map(order) if col.name == "source" else col,
        kind="stable",
    )
    report.tables.append(
        render.Table(
            f"Time to {target}{about}",
            pd.DataFrame(
                {
                    "curve": times["curve"],
                    "workers": times["workers"],
                    "per_worker_batch": times["per_worker_batch"],
                    "global_batch": times["global_batch"],
                    "steps": times["steps"],
                    "step_time_ms": 1e3 * times["step_time_s"],
                    "step_time": [step_time_source(row) for _, row in times.iterrows()],
                    "time_s": times["time_s"],
                }
            ),
            "Training steps only, sorted by where the step time comes from. measured: median "
            "step time of this machine's scaling runs; oversubscribed: measured with more "
            "worker threads than cores, the time of contention, kept apart from the measured "
            "points; model: the scaling model fitted to them (extrapolated: beyond the worker "
            "counts it was validated at).",
        )
    )
    return findings.time_findings(study)


def step_time_source(row: pd.Series) -> str:
    """Where a time-to-target row's step time comes from, in the table's words."""
    if row["source"] == ttt.MODEL and row["extrapolated"]:
        return "model, extrapolated"
    return str(row["source"])


def sync_section(tree: data.ResultsTree, figs: FigureWriter, report: render.Report) -> None:
    """Synchronization strategies compared: only when the results hold such runs."""
    table = strategies.sync_table(tree.runs)
    if table.empty:
        return
    groups = list(table.groupby("group", sort=True))
    for label, group in groups:
        suffix = f"-{slug(label)}" if len(groups) > 1 else ""
        about = f" ({label})" if len(groups) > 1 else ""
        figs.add(
            f"sync_throughput{suffix}",
            strategies.throughput_by_strategy(group, f"Throughput by synchronization{about}"),
            f"Throughput per synchronization strategy vs workers{about}",
            "Median measured samples/s of the complete runs of each strategy. With one worker "
            "nothing is communicated, so every strategy starts from the same point.",
        )
        figs.add(
            f"sync_bytes{suffix}",
            strategies.bytes_by_strategy(group, f"Bytes communicated per step{about}"),
            f"Bytes per step per strategy{about}",
            "Bytes each worker sends on the wire per training step, counted by the suite inside "
            "each strategy (a point-to-point send its tensor; an all-reduce of S bytes among n "
            "ranks 2(n-1)/n x S, as a ring sends; local SGD's averages spread over the steps "
            "between them). Hatched: the parameter server's own traffic. Runs with one worker "
            "communicate nothing.",
        )
        figs.add(
            f"sync_tradeoff{suffix}",
            strategies.accuracy_vs_bytes(group, f"Final accuracy vs communication{about}"),
            f"Final accuracy vs bytes communicated{about}",
            "Each strategy's final test accuracy against its bytes per step per worker (log "
            "scale), one panel per worker count. Filled points are on the frontier: more than "
            "1 point more accurate than every strategy that communicates less; hollow points "
            "are not worth their extra bytes.",
        )
        report.findings += [
            f"{label}: {s}" if len(groups) > 1 else s for s in strategies.findings(group)
        ]
    report.tables.append(
        render.Table(
            "Synchronization strategies",
            strategies.table_for_report(table),
            "Medians per strategy and worker count. Bytes are per step per worker (the server's "
            "separately); comm: time the strategy's communication was in flight per step; "
            "exposed comm: the part of the step it added, where measured.",
        )
    )


def lr_section(
    tree: data.ResultsTree, group: pd.DataFrame, suffix: str, about: str, figs: FigureWriter
) -> None:
    batch = data.lr_batch(group)
    runs = data.one_run_per(group[group["global_batch"] == batch], ["lr_rule"])
    series = {r["lr_rule"]: data.lr_series(tree, r["run_id"]) for _, r in runs.iterrows()}
    series = {rule: s for rule, s in series.items() if len(s)}
    if not series:
        return
    warm = runs[(runs["lr_rule"] == "linear_warmup") & runs["warmup_epochs"].notna()]
    warmup_end = None
    if len(warm) and "steps_per_epoch" in warm.columns:
        spe = pd.to_numeric(warm["steps_per_epoch"], errors="coerce").iloc[0]
        warmup_end = float(warm["warmup_epochs"].iloc[0] * spe) if pd.notna(spe) else None
    figs.add(
        f"lr_schedule{suffix}",
        plots.lr_schedules(series, batch, warmup_end),
        f"Learning rate by step at global batch {batch}{about}",
        "The learning rate each rule applied (from steps.csv, sampled, and the evaluations in "
        "epochs.csv). `linear_warmup` ramps from the base LR to the scaled LR over its warmup.",
    )


def runs_tables(tree: data.ResultsTree, report: render.Report) -> None:
    unfinished = data.unfinished_runs(tree.runs)
    if len(unfinished):
        report.tables.insert(
            0,
            render.Table(
                "Failed runs",
                unfinished,
                "Runs that produced no result (failed, or still running); not plotted.",
            ),
        )
    runs = tree.runs.sort_values(["workload", "mode", "lr_rule", "global_batch", "workers", "seed"])
    listing = pd.DataFrame(
        {
            "run_id": runs["run_id"],
            "status": runs["status"],
            "machine": runs["machine"],
            "workers": runs["workers"],
            "global_batch": runs["global_batch"],
            "lr_rule": runs["lr_rule"],
            "sync": runs["sync_label"],
            "seed": runs["seed"],
            "samples_per_s": runs["samples_per_s"],
            "step_time_ms": 1e3 * runs["step_time_s"],
            "final_acc_pct": 100 * runs["final_eval_acc"],
        }
    )
    for col in ("machine", "sync"):
        if listing[col].nunique() <= 1:
            listing = listing.drop(columns=col)
    report.tables.append(
        render.Table("All runs", listing, "Every column of every run is in `summary.csv`.")
    )


def build_report(results_dir: str | Path, out: str | Path | None = None) -> Written:
    """Read ``results_dir`` and write its report to ``out`` (default reports/<name>)."""
    tree = data.load_tree(results_dir)
    out = prepare_out(Path(out) if out is not None else default_out(results_dir))
    report = render.Report(
        title=f"dpsuite report: {Path(results_dir).resolve().name}",
        meta=[status_line(tree), *machines_lines(tree.runs, tree.comm)],
    )
    note = data.synthetic_note(tree.runs) if not tree.runs.empty else None
    if note:
        report.meta.append(note)
    figs = FigureWriter(out)
    fits = studies.scaling_fits(tree)
    scaling = data.scaling_table(tree.runs) if not tree.runs.empty else pd.DataFrame()
    accuracy, target_groups = studies.split(data.convergence_runs(tree.runs))
    targets = [studies.analyse(tree, label, group, fits) for label, group in target_groups]
    tree.warnings += [warning for study in targets for warning in study.warnings()]
    if not tree.runs.empty:
        report.findings += findings.run_status_findings(tree.runs)
        report.file("Runs")
        scaling_section(tree, scaling, figs, report)
        report.file("Scaling")
    comm_section(tree, figs, report)
    report.file("All-reduce")
    model_section(fits, figs, report)
    report.file("Scaling model")
    if not tree.runs.empty:
        sync_section(tree, figs, report)
        report.file("Synchronization strategies")
        convergence_section(tree, figs, report, accuracy)
        report.file("Convergence")
        target_sections(tree, figs, report, targets)
        report.file("Steps to target")
        runs_tables(tree, report)
        data.write_summary(data.summary_frame(tree.runs), out)
    else:
        data.write_summary(pd.DataFrame(columns=["machine", *data.RUN_COLUMNS]), out)
    report.headline = headline.headline(tree, scaling, accuracy, targets)
    if not figs.figures:
        report.headline.append(
            "No plot applies to these results: scaling plots need complete DDP runs at two or "
            "more worker counts; convergence plots need runs at two or more global batches "
            "under two or more LR rules (or simulated workers)."
        )
    report.figures = figs.figures
    report.warnings = tree.warnings
    render.write(report, out)
    owned.finish(out)
    return Written(out=out, warnings=tree.warnings, headline=report.headline)
