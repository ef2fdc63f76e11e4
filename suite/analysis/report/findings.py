"""Findings: sentences computed from the numbers in the tables (no sentence is written by hand).

Accuracies are fractions in the tables and points (percent) in the sentences.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.analysis.report import critical_batch as cb
from suite.analysis.report import data, studies
from suite.analysis.report import target_study as ts
from suite.analysis.report import time_to_target as ttt
from suite.analysis.report.plots import approx, human_bytes

SUPERLINEAR = 1.10  # efficiency above this points at a slow baseline, not at magic
ACCURACY_TOLERANCE = 0.01  # "holds the baseline" when within 1 point of it


def pct(fraction: float, digits: int = 1) -> str:
    return f"{100 * fraction:.{digits}f} %"


def run_status_findings(runs: pd.DataFrame) -> list[str]:
    counts = runs["status"].value_counts()
    out = []
    total = len(runs)
    if counts.get("diverged", 0):
        out.append(
            f"{counts['diverged']} of {total} runs diverged (non-finite loss); they are drawn "
            "with an × at their last finite evaluation."
        )
    if counts.get("failed", 0):
        out.append(f"{counts['failed']} of {total} runs failed; they are listed under Failed runs.")
    if counts.get("running", 0):
        out.append(f"{counts['running']} of {total} runs are still running and are not plotted.")
    return out


def scaling_findings(scaling: pd.DataFrame) -> list[str]:
    out = []
    for label, grp in scaling.groupby("series", sort=False):
        grp = grp.sort_values("workers")
        first, last = grp.iloc[0], grp.iloc[-1]
        n0, n = int(first["workers"]), int(last["workers"])
        speedup = last["samples_per_s"] / first["samples_per_s"]
        out.append(
            f"{label}: throughput goes from {first['samples_per_s']:,.0f} samples/s on "
            f"{n0} worker{'s' if n0 > 1 else ''} to {last['samples_per_s']:,.0f} samples/s on "
            f"{n} workers, {speedup:.2f}× the speed ({pct(last['efficiency'], 0)} scaling "
            "efficiency)."
        )
        more = grp[grp["workers"] > n0]
        good = more[more["efficiency"] >= data.EFFICIENCY_THRESHOLD]
        if good.empty:
            best = more.loc[more["efficiency"].idxmax()]
            out.append(
                f"{label}: no worker count above {n0} reaches {pct(data.EFFICIENCY_THRESHOLD, 0)} "
                f"scaling efficiency (best: {pct(best['efficiency'], 0)} at "
                f"{int(best['workers'])} workers)."
            )
        else:
            k = good.loc[good["workers"].idxmax()]
            out.append(
                f"{label}: largest worker count with ≥ {pct(data.EFFICIENCY_THRESHOLD, 0)} scaling "
                f"efficiency: {int(k['workers'])} ({pct(k['efficiency'], 0)})."
            )
        top = grp.loc[grp["efficiency"].idxmax()]
        if top["efficiency"] > SUPERLINEAR:
            out.append(
                f"{label}: efficiency above 100 % ({pct(top['efficiency'], 0)} at "
                f"{int(top['workers'])} workers) means the {n0}-worker run was slower per worker "
                "than the larger ones (often thread oversubscription or a busy machine during "
                "that run); rerun it before trusting this curve."
            )
        out.extend(communication_findings(label, grp))
    return out


def communication_findings(label: str, grp: pd.DataFrame) -> list[str]:
    """Exposed communication at the largest worker count that has it measured."""
    have = grp.dropna(subset=["exposed_comm_s", "step_time_s"])
    have = have[have["workers"] > 1]
    if have.empty:
        return []
    row = have.iloc[-1]
    n, step, exposed = int(row["workers"]), row["step_time_s"], row["exposed_comm_s"]
    if exposed <= 0:  # a step with gradient sync measured no slower than one without
        return [f"{label}: no measurable exposed communication at {n} workers."]
    sentence = (
        f"{label}: exposed communication is {pct(exposed / step)} of step time at {n} workers "
        f"({1e3 * exposed:.2f} of {1e3 * step:.2f} ms)"
    )
    wait = row.get("straggler_wait_s")
    if pd.notna(wait) and wait > 0:
        sentence += f"; waiting for the slowest rank adds {1e3 * wait:.2f} ms more"
    comm = row.get("comm_time_s")
    if pd.notna(comm) and comm > 0 and exposed > comm:
        # More exposed than the whole all-reduce: the difference is no communication.
        sentence += (
            f"; that is more than the whole {1e3 * comm:.2f} ms all-reduce, so "
            f"{1e3 * (exposed - comm):.2f} ms of it is not the all-reduce (compute slowed while "
            "it runs, or ranks out of step)"
        )
    elif pd.notna(comm) and comm > 0:
        hidden = min(max(1 - exposed / comm, 0.0), 1.0)
        sentence += (
            f"; {pct(hidden, 0)} of the {1e3 * comm:.2f} ms all-reduce is hidden behind compute"
        )
    return [sentence + "."]


def convergence_findings(acc: pd.DataFrame, base: data.Baseline | None) -> list[str]:
    """Where each rule keeps the small-batch accuracy, and where it falls or diverges."""
    if base is None:
        out = ["No run at the smallest global batch completed, so there is no baseline accuracy."]
        for rule in data.rule_order(acc["lr_rule"]):
            div = acc[(acc["lr_rule"] == rule) & (acc["diverged"] > 0)]
            if len(div):
                batches = ", ".join(str(b) for b in sorted(div["global_batch"]))
                out.append(f"`{rule}` diverges at global batch {batches}.")
        return out
    spread = f"; standard deviation {100 * base.std:.1f} points" if base.runs > 1 else ""
    if base.shared:
        spread += (
            f"; {base.shared} more run{'s' if base.shared > 1 else ''} under other rules "
            f"{'train' if base.shared > 1 else 'trains'} one of these runs again (at the base "
            "batch every rule gives the base LR) and count once"
        )
    out = [
        f"Baseline: at global batch {base.batch} the runs reach {pct(base.acc)} test accuracy "
        f"(mean of {base.runs} run{'s' if base.runs > 1 else ''}{spread})."
    ]
    for rule in data.rule_order(acc["lr_rule"]):
        rows = scaled_rows(acc, rule, base)
        if not rows.empty:
            out.append(rule_finding(rule, rows, base))
    return out


def holds_baseline(rows: pd.DataFrame, base: data.Baseline) -> list[bool]:
    """Per row of an accuracy table: no run diverged and the mean is within 1 point of base."""
    return [
        r["diverged"] == 0
        and pd.notna(r["acc_mean"])
        and r["acc_mean"] >= base.acc - ACCURACY_TOLERANCE
        for _, r in rows.iterrows()
    ]


def largest_holding(rows: pd.DataFrame, base: data.Baseline) -> int | None:
    """The largest global batch up to which every batch (sorted rows) holds the baseline."""
    largest = None
    for held, batch in zip(holds_baseline(rows, base), rows["global_batch"], strict=True):
        if not held:
            break
        largest = int(batch)
    return largest


def scaled_rows(acc: pd.DataFrame, rule: str, base: data.Baseline) -> pd.DataFrame:
    """A rule's accuracy rows at the batches it scaled to, sorted by batch.

    At the baseline batch the rules share the recipe's LR, so it is left out; a rule with its
    own recipe (lars) starts there.
    """
    own = rule in data.OWN_RECIPE_RULES
    from_batch = acc["global_batch"] >= base.batch if own else acc["global_batch"] > base.batch
    return acc[(acc["lr_rule"] == rule) & from_batch].sort_values("global_batch")


def rule_finding(rule: str, rows: pd.DataFrame, base: data.Baseline) -> str:
    holds = holds_baseline(rows, base)
    batches = list(rows["global_batch"])
    largest = batches[-1]
    if all(holds):
        last = rows.iloc[-1]
        return (
            f"`{rule}` stays within 1 point of the batch-{base.batch} accuracy at every global "
            f"batch tested, up to {largest} ({pct(last['acc_mean'])})."
        )
    first_fail = holds.index(False)
    if first_fail == 0:
        head = (
            f"`{rule}` falls more than 1 point below the batch-{base.batch} accuracy already at "
            f"global batch {batches[0]}"
        )
    else:
        head = (
            f"`{rule}` stays within 1 point of the batch-{base.batch} accuracy up to global batch "
            f"{batches[first_fail - 1]}"
        )
    tail = []
    diverged = rows[rows["diverged"] > 0]
    if not diverged.empty:
        parts = [
            f"{r['global_batch']}"
            + (f" ({r['diverged']} of {r['runs']} runs)" if r["runs"] > 1 else "")
            for _, r in diverged.iterrows()
        ]
        tail.append(f"diverges at global batch {', '.join(parts)}")
    finished = rows[rows["acc_mean"].notna()]
    beyond = finished[finished["global_batch"] >= batches[first_fail]]
    if not beyond.empty:
        worst = beyond.iloc[-1]
        tail.append(f"falls to {pct(worst['acc_mean'])} at batch {worst['global_batch']}")
    return head + ("; " + " and ".join(tail) if tail else "") + "."


# ---- the steps-to-target study ----------------------------------------------------------------


def rules_text(rules: list[str]) -> str:
    """`a`, `b` and `c`."""
    named = [f"`{r}`" for r in rules]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def steps_text(steps: float) -> str:
    return f"{steps:,.0f}" if math.isfinite(steps) else "never"


def target_findings(study: studies.TargetStudy) -> list[str]:
    """The split counted on, the LR oracle and its own checks, censored seeds, each rule's
    efficiency."""
    if study.best.empty:
        return []
    return [
        *split_findings(study),
        *oracle_findings(study),
        *faster_findings(study),
        *untuned_findings(study),
        *censoring_findings(study),
        *efficiency_findings(study),
    ]


def split_findings(study: studies.TargetStudy) -> list[str]:
    """Which split counted the steps and chose the oracle's LR, and which reports accuracy."""
    if not study.on_validation:
        return [
            "These runs have no validation split: steps to target are counted on the test "
            "split, so the same split chooses the oracle's LR and measures it (a validation "
            "split, e.g. `workload.validation_samples`, keeps the two apart)."
        ]
    sentence = (
        "Steps to target are counted on the validation split, which also chooses the oracle's "
        "LR; the test split is evaluated once, at the end"
    )
    runs = ts.oracle_runs(study.group, study.best)
    acc = pd.to_numeric(runs.get("final_test_acc", pd.Series(dtype=float)), errors="coerce")
    if acc.notna().any():
        sentence += (
            f": the LR oracle's runs end at {pct(float(acc.median()), 1)} test accuracy "
            f"(median of {studies.plural(int(acc.notna().sum()), 'run')})"
        )
    return [sentence + "."]


def oracle_findings(study: studies.TargetStudy) -> list[str]:
    best, target = study.best, pct(study.target, 0)
    reached = best[np.isfinite(best["steps"])]
    if reached.empty:
        return [f"No run reached {target} {study.split} accuracy at any global batch."]
    lrs = best["lrs"].astype(int)
    counts = f"{lrs.min()}" if lrs.min() == lrs.max() else f"{lrs.min()}–{lrs.max()}"
    sentence = (
        f"LR oracle (at each global batch the fewest seed-median steps over the {counts} "
        f"distinct peak LRs tried there): {target} {study.split} accuracy in "
        + ", ".join(
            f"{row['steps']:,.0f} steps at {int(row['global_batch'])} (LR {row['peak_lr']:.3g})"
            for _, row in reached.iterrows()
        )
    )
    never = best[~np.isfinite(best["steps"])]["global_batch"]
    if len(never):
        batches = ", ".join(str(int(b)) for b in never)
        sentence += f"; no LR tried reached it at {batches}"
    return [sentence + "."]


def faster_findings(study: studies.TargetStudy) -> list[str]:
    """Where the oracle's steps fall faster than perfect scaling: the smaller batch's baseline
    is not tuned."""
    out = []
    for _, row in study.faster.iterrows():
        batch, double = int(row["global_batch"]), int(row["double"])
        out.append(
            f"From global batch {batch} to {double} the LR oracle's steps fall to "
            f"{row['ratio']:.2f}× ({row['steps']:,.0f} → {row['double_steps']:,.0f}), faster "
            f"than perfect scaling (0.5×) beyond the seeds' spread (every seed at {double} "
            f"below half of every seed at {batch}): with a tuned baseline steps never fall "
            f"faster than that, so batch {batch} is not tuned, the knee measured from it is "
            "unreliable, and it is left out of the fitted critical batch."
        )
    return out


def untuned_findings(study: studies.TargetStudy) -> list[str]:
    """Batches with too few LRs, or whose best LR is the largest or smallest tried."""
    out = []
    for _, row in study.untuned.iterrows():
        batch = int(row["global_batch"])
        tried = ts.distinct_lrs(study.settings[study.settings["global_batch"] == batch]["peak_lr"])
        listed = ", ".join(f"{lr:.3g}" for lr in tried)
        if row["too_few_lrs"]:
            out.append(
                f"At global batch {batch} only {studies.plural(len(tried), 'peak LR')} ({listed}) "
                f"{'was' if len(tried) == 1 else 'were'} tried, fewer than "
                f"{ts.MIN_LRS}: the oracle there is not tuned, and every ratio to it is suspect."
            )
            continue
        side = "largest" if row["peak_lr"] >= tried[-1] else "smallest"
        named = "" if row["setting"].startswith("LR ") else f", `{row['setting']}`"
        out.append(
            f"At global batch {batch} the fewest steps come from the {side} LR tried (peak LR "
            f"{row['peak_lr']:.3g}{named}, of {listed}): the best-tuned steps there may be "
            "fewer still."
        )
    return out


def censoring_findings(study: studies.TargetStudy) -> list[str]:
    """How many runs missed the target, and which seed medians that makes infinite."""
    runs = ts.finished_runs(study.group)
    missed = int((~np.isfinite(runs["steps"])).sum())
    if not missed:
        return []
    budget = f"the {study.epochs:g}-epoch budget" if study.epochs else "the budget"
    sentence = (
        f"{missed} of {len(runs)} runs did not reach {pct(study.target, 0)} within {budget} "
        "(or diverged first); each counts as never reaching it, so a seed median is never "
        "where half the seeds or more missed"
    )
    rules = study.rules[
        ~np.isfinite(study.rules["steps"]) & (study.rules["setting"] != ts.BASE_SETTING)
    ]
    parts = [
        f"{rules_text(data.rule_order(grp['lr_rule']))} at {int(batch)}"
        for batch, grp in rules.groupby("global_batch", sort=True)
    ]
    grid = study.settings[study.settings["lr_rule"] == ts.GRID_RULE]
    grid_never = int((~np.isfinite(grid["steps"])).sum())
    if grid_never:
        parts.append(f"{grid_never} of the {len(grid)} (LR, batch) points of the `power` grid")
    return [sentence + (": " + "; ".join(parts) if parts else "") + "."]


def efficiency_findings(study: studies.TargetStudy) -> list[str]:
    """Per rule, its efficiency against the oracle at every batch above the base batch."""
    eff = study.efficiency
    base = ts.base_batch(study.group)
    eff = eff[eff["global_batch"] != base] if base is not None else eff
    out = []
    for rule in data.rule_order(eff["lr_rule"]):
        rows = eff[eff["lr_rule"] == rule].sort_values("global_batch")
        out.append(
            f"`{rule}` against the LR oracle (oracle steps / its steps to "
            f"{pct(study.target, 0)}): {efficiency_list(rows)}."
        )
    return out


def efficiency_list(rows: pd.DataFrame) -> str:
    """'100 % at 64, 73 % at 128, never from 256 on' for one rule's rows, sorted by batch."""
    batches, values = list(rows["global_batch"]), list(rows["efficiency"])
    tail = len(values)
    while tail > 0 and values[tail - 1] == 0:
        tail -= 1
    parts = [
        f"{pct(e, 0)} at {int(b)}" if e > 0 else f"never at {int(b)}"
        for b, e in zip(batches[:tail], values[:tail], strict=True)
    ]
    if tail == len(values) - 1:
        parts.append(f"never at {int(batches[tail])}")
    elif tail < len(values):
        parts.append(f"never from {int(batches[tail])} on")
    return ", ".join(parts)


def knee_text(knee: cb.Knee) -> str:
    """Where the LR oracle's curve leaves perfect scaling, or why that is not known."""
    factor = f"{cb.KNEE_FACTOR:g}×"
    head = f"the LR oracle's steps to target stay within {factor} perfect scaling up to batch "
    if knee.batch is not None:
        return (
            f"the LR oracle's steps to target leave {factor} perfect scaling at global batch ≈ "
            f"{approx(knee.batch)} (interpolated in log-log between {knee.within} and "
            f"{knee.beyond})"
        )
    if knee.beyond is not None:
        return (
            f"{head}{knee.within}, and at {knee.beyond} no LR reached the target within a budget "
            f"of {knee.room:.1f}× its perfect-scaling steps: the knee lies between {knee.within} "
            f"and {knee.beyond}"
        )
    if knee.unreached is not None:
        room = f"only {knee.room:.1f}×" if math.isfinite(knee.room or math.nan) else "unknown"
        return (
            f"{head}{knee.within}; at {knee.unreached} no LR reached the target, but its budget "
            f"allows {room} the perfect-scaling steps, so the knee is not placed"
        )
    if knee.short_budget is not None:
        return (
            f"{head}{knee.within}, but from batch {knee.short_budget} on the budget allows at most "
            f"{knee.room:.1f}× the perfect-scaling steps, so no batch could leave {factor}: this "
            "budget cannot measure the knee"
        )
    return (
        f"{head.removesuffix('batch ')}the largest batch measured ({knee.within}), with room in "
        "the budget to leave it: "
        f"the knee lies above {knee.within}"
    )


def predicted_text(prediction: cb.Prediction, trained: str) -> str:
    estimate = (
        "pooled over each run's measured steps" if prediction.pooled else "mean over each run"
    )
    spread = (
        f", {approx(prediction.low)}–{approx(prediction.high)} over training "
        f"({cb.BAND[0]}th–{cb.BAND[1]}th percentile)"
        if prediction.low is not None and prediction.high is not None
        else ""
    )
    runs = f"{prediction.runs} run{'s' if prediction.runs > 1 else ''}"
    return (
        f"the gradient noise scale of the {runs} that {trained} (B_simple {estimate}, median "
        f"over runs) predicts a critical batch ≈ {approx(prediction.batch)}{spread}"
    )


def critical_batch_findings(study: studies.TargetStudy) -> list[str]:
    """B_crit fitted beside the noise scale near the target; the knee beside what the noise
    scale predicts for it; the pooled noise scale (secondary); what was left out."""
    out = [*fit_findings(study)]
    knee, prediction = study.knee, study.prediction
    trained = f"reached {pct(study.target, 0)}"
    if knee is not None:
        out.append(capital(knee_text(knee)) + knee_prediction_text(study) + ".")
    if prediction is not None:
        out.append(
            capital(predicted_text(prediction, trained))
            + "; pooled from step 0, every window weighs by its |G|², the largest early in "
            "training, so this value leans to the start of training: it is secondary to the "
            "value near the target."
        )
    if study.trained.left_out and prediction is not None:
        n = study.trained.left_out
        out.append(
            f"{n} run{'s' if n > 1 else ''} that {study.trained.reason} "
            f"{'are' if n > 1 else 'is'} left out of the noise-scale prediction."
        )
    return out


def fit_text(fit: cb.CriticalFit) -> str:
    """S_min, E_min and B_crit with their intervals."""
    return (
        f"S_min = {fit.s_min:,.0f} steps ({interval_text(fit.s_min_ci)}), E_min = "
        f"{fit.e_min:,.0f} samples ({interval_text(fit.e_min_ci)}), B_crit = E_min / S_min ≈ "
        f"{approx(fit.b_crit)} ({interval_text(fit.b_crit_ci)})"
    )


def interval_text(ci: tuple[float, float]) -> str:
    low, high = ci
    if not (math.isfinite(low) or math.isinf(low)) or math.isnan(high):
        return "no interval"
    top = approx(high) if math.isfinite(high) else "∞"
    return f"95 % interval {approx(low)}–{top}"


def fit_findings(study: studies.TargetStudy) -> list[str]:
    """The fitted trade-off S(B) = S_min + E_min / B, and the noise scale near the target."""
    fit, near = study.fit, study.near
    out = []
    if fit is None:
        out.append(
            "No critical batch is fitted: S(B) = S_min + E_min / B needs the LR oracle's "
            "steps at 3 or more batches that reached the target and are not known to be "
            "untuned."
        )
    else:
        left = [
            f"{', '.join(map(str, batches))} ({why})"
            for batches, why in (
                (fit.censored, "no LR reached the target in half its seeds"),
                (fit.untuned, "not tuned: steps fell faster than perfect scaling from it"),
            )
            if batches
        ]
        out.append(
            "Critical batch fitted as McCandlish et al. (2018) define it: S(B) = S_min + "
            f"E_min / B fitted to the LR oracle's seed-median steps at batches "
            f"{', '.join(map(str, fit.batches))} (least squares in relative error"
            + (f"; left out: {'; '.join(left)}" if left else "")
            + f"): {fit_text(fit)}; the intervals resample the seeds of every LR at every "
            f"batch and take the oracle again ({fit.resamples} resamples)."
        )
    if near is None:
        out.append(
            "No gradient noise scale near the target: the LR oracle's runs recorded no window "
            "of B_simple before they reached it."
        )
        return out
    sentence = (
        f"B_simple near the target (the windows of the last {NEAR_PERCENT} of the steps before "
        f"each of the LR oracle's runs reached {pct(study.target, 0)}, pooled per run; median "
        f"over {studies.plural(near.runs, 'run')}): ≈ {approx(near.batch)} "
        f"({interval_text((near.low, near.high))} of the median)"
    )
    if near.without:
        sentence += f"; {studies.plural(near.without, 'run')} without a window before it left out"
    if fit is not None and math.isfinite(fit.b_crit):
        sentence += (
            f". Predicted / fitted B_crit = {near.batch / fit.b_crit:.2g} "
            f"(predicted {approx(near.batch)}, {interval_text((near.low, near.high))}; fitted "
            f"{approx(fit.b_crit)}, {interval_text(fit.b_crit_ci)}): "
            + (
                "within an order of magnitude, as McCandlish et al. report"
                if 0.1 <= near.batch / fit.b_crit <= 10
                else "more than an order of magnitude apart"
            )
        )
    return out + [sentence + "."]


NEAR_PERCENT = f"{100 * cb.NEAR_TARGET:g} %"


def knee_prediction_text(study: studies.TargetStudy) -> str:
    """The knee beside what the noise scale predicts for a 2×-perfect-scaling knee."""
    knee, near = study.knee, study.near
    if knee is None or near is None:
        return ""
    expected = cb.predicted_knee(near.batch, knee.base_batch)
    ratio = cb.predicted_over_found(expected, knee)
    if ratio is None:
        return ""
    low, high = ratio
    found = (
        f"= {low:.2g}"
        if low == high
        else f"< {high:.2g}"
        if low == 0
        else f"between {low:.2g} and {high:.2g}"
    )
    return (
        f"; for that definition the noise scale near the target predicts B_noise + "
        f"{cb.KNEE_FACTOR:g}·B0 = {approx(expected)} (B0 = {knee.base_batch}): predicted / "
        f"found {found}"
        + (
            f" (B0 = {knee.base_batch} is not tuned: the knee is unreliable)"
            if knee.base_batch in set(study.faster["global_batch"])
            else ""
        )
    )


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def time_findings(study: studies.TargetStudy) -> list[str]:
    """The fastest way to the target on this machine, at the best LR and under each rule."""
    times = study.times
    if times.empty:
        return []
    target = pct(study.target, 0)
    out = []
    best = ttt.fastest(times, ttt.ORACLE)
    if best.measured is not None:
        row = best.measured
        out.append(
            f"Time to {target} (training steps only) at the best LR per batch: fastest measured "
            f"on this machine with {ttt.point(row)} ({ttt.seconds(row['time_s'])}: "
            f"{row['steps']:,.0f} steps of {1e3 * row['step_time_s']:.2g} ms)"
            + predicted_clause(best.predicted, study.model)
            + "."
        )
    parts = []
    for rule in data.rule_order(times[times["curve"] != ttt.ORACLE]["curve"]):
        found = ttt.fastest(times, rule)
        if found.measured is not None:
            parts.append(
                f"`{rule}` {ttt.point(found.measured)} ({ttt.seconds(found.measured['time_s'])})"
            )
    if parts:
        out.append(f"Fastest measured time to {target} per rule: {', '.join(parts)}.")
    return out


def predicted_clause(row: pd.Series | None, model) -> str:
    """'; the scaling model predicts ...' for a faster point beyond the measurements."""
    if row is None:
        return ""
    beyond = (
        f", extrapolated beyond the {model.validated_max} workers it was validated at"
        if row["extrapolated"] and model is not None
        else ""
    )
    return (
        f"; the scaling model predicts {ttt.seconds(row['time_s'])} with {ttt.point(row)}{beyond}"
    )


def comm_bench_findings(comm: pd.DataFrame) -> list[str]:
    """Per benchmark and collective: the peak bus bandwidth, and sizes with wrong results."""
    out = []
    keys = ["machine", "world_size", "backend", "bench_id", "collective"]
    for (machine, world, backend, _, collective), grp in comm.groupby(
        keys, dropna=False, sort=True
    ):
        peak = grp.loc[grp["busbw_GBps"].idxmax()]
        ranks = f"{int(world)} ranks" if pd.notna(world) else "? ranks"
        name = str(collective).replace("_", "-")
        out.append(
            f"{machine}, {ranks} ({backend}): peak {name} bus bandwidth "
            f"{peak['busbw_GBps']:.2f} GB/s at {human_bytes(peak['size_bytes'])} messages."
        )
        errors = pd.to_numeric(grp["errors"], errors="coerce").fillna(0)
        if (errors > 0).any():
            out.append(
                f"{machine}, {ranks}: the {name} gave wrong results at "
                f"{int((errors > 0).sum())} message sizes; its timings are not to be trusted."
            )
    return out


def model_findings(validation: pd.DataFrame) -> list[str]:
    """How far the validation reached, and the model's step-time error per worker count."""
    multi = validation[validation["workers"] > 1].reset_index(drop=True)
    crowded_rows = multi.get("oversubscribed", pd.Series(False, index=multi.index)).astype(bool)
    reached = multi.loc[~crowded_rows, "workers"]
    out = [
        f"The scaling model is validated against measurements up to "
        f"{int(reached.max()) if len(reached) else 1} workers"
        + (" (runs with more worker threads than cores left out)" if crowded_rows.any() else "")
        + "; its predictions beyond are extrapolation."
    ]
    for workers, grp in multi.groupby("workers", sort=True):
        worst = grp.loc[grp["error_pct"].abs().idxmax()]
        crowded = bool(grp.get("oversubscribed", pd.Series(dtype=bool)).any())
        out.append(
            f"At {int(workers)} workers the scaling model's step time is within "
            f"{abs(worst['error_pct']):.0f} % of the measured one (worst: {worst['series']}, "
            f"{worst['error_pct']:+.0f} %)"
            + (
                "; these runs had more worker threads than cores, which the model, fitted to "
                "one worker's compute, does not know about."
                if crowded
                else "."
            )
        )
    return out
