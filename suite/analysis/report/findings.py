"""Findings: sentences computed from the numbers in the tables (no sentence is written by hand).

Accuracies are fractions in the tables and points (percent) in the sentences.
"""

from __future__ import annotations

import pandas as pd

from suite.analysis.report import critical_batch as cb
from suite.analysis.report import data
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
    comm = row.get("comm_time_s")
    if pd.notna(comm) and comm > 0:
        hidden = min(max(1 - exposed / comm, 0.0), 1.0)
        sentence += (
            f"; {pct(hidden, 0)} of the {1e3 * comm:.2f} ms all-reduce is hidden behind compute"
        )
    return [sentence + "."]


def convergence_findings(
    group: pd.DataFrame, acc: pd.DataFrame, base: data.Baseline | None
) -> list[str]:
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
    out = [
        f"Baseline: at global batch {base.batch} the runs reach {pct(base.acc)} test accuracy "
        f"(mean of {base.runs} run{'s' if base.runs > 1 else ''}{spread})."
    ]
    for rule in data.rule_order(acc["lr_rule"]):
        rows = scaled_rows(acc, rule, base)
        if not rows.empty:
            out.append(rule_finding(rule, rows, base))
    out.extend(target_findings(group))
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


def target_findings(group: pd.DataFrame) -> list[str]:
    """How steps-to-target shrink with batch for the rule measured at the most batch sizes."""
    targets = group["target_acc"].dropna().unique()
    if len(targets) != 1:
        return []
    target = float(targets[0])
    table = data.steps_to_target_table(group)
    out = []
    missed = group[group["steps_to_target"].isna()]
    if len(missed):
        out.append(
            f"{len(missed)} of {len(group)} runs never reached {pct(target, 0)} test accuracy "
            "(not drawn in the steps-to-target plot)."
        )
    if table.empty:
        return out
    counts = table.groupby("lr_rule")["global_batch"].nunique()
    if counts.max() < 2:
        return out
    rule = next(r for r in data.rule_order(counts.index) if counts[r] == counts.max())
    r = table[table["lr_rule"] == rule].sort_values("global_batch")
    (b1, s1), (b2, s2) = (
        r.iloc[0][["global_batch", "steps_to_target"]],
        r.iloc[-1][["global_batch", "steps_to_target"]],
    )
    ideal = s1 * b1 / b2
    out.append(
        f"With `{rule}`, steps to reach {pct(target, 0)} fall from {s1:,.0f} at batch {b1:g} to "
        f"{s2:,.0f} at batch {b2:g}; perfect scaling would need {ideal:,.0f} "
        f"({pct((s1 / s2) / (b2 / b1), 0)} of the ideal reduction)."
    )
    return out


def critical_batch_findings(
    prediction: cb.Prediction | None, knee: cb.Knee | None, best: pd.DataFrame
) -> list[str]:
    """How far the critical batch predicted from the noise scale is from the empirical knee."""
    factor = f"{cb.KNEE_FACTOR:g}×"
    if knee is None:
        reached = best[best["steps_to_target"].notna()]["global_batch"]
        if prediction is None or best.empty:
            return []
        why = (
            f"only batch {int(reached.iloc[0])} reached the target accuracy"
            if len(reached) == 1
            else "no run reached the target accuracy"
        )
        return [f"{predicted_text(prediction)}; {why}, so there is no empirical knee to compare."]
    if knee.batch is not None:
        found = (
            f"the steps-to-target curve (best LR rule per batch) leaves perfect scaling by "
            f"{factor} at batch ≈ {approx(knee.batch)}"
        )
    else:
        where = (
            f"up to batch {knee.within} and no run reached the target at batch {knee.unreached}"
            if knee.unreached is not None
            else f"up to the largest batch measured ({knee.within})"
        )
        found = (
            f"the steps-to-target curve (best LR rule per batch) stays within {factor} of perfect "
            f"scaling {where}, so its knee lies above {knee.within}"
        )
    if prediction is None:
        return [
            found[0].upper() + found[1:] + "; no gradient noise scale was recorded in these "
            "runs, so there is no predicted critical batch to compare it with."
        ]
    head = f"{predicted_text(prediction)}; {found}"
    if knee.batch is None:
        if prediction.batch > knee.within:
            return [head + ", consistent with the prediction."]
        return [head + f": the prediction is at least {knee.within / prediction.batch:.1f}× low."]
    ratio = max(knee.batch, prediction.batch) / min(knee.batch, prediction.batch)
    side = "below" if prediction.batch < knee.batch else "above"
    verdict = (
        "within an order of magnitude, as McCandlish et al. report"
        if ratio <= 10
        else "more than an order of magnitude; McCandlish et al. report agreement within one"
    )
    return [head + f": the prediction is a factor of {ratio:.1f} {side} it ({verdict})."]


def predicted_text(prediction: cb.Prediction) -> str:
    runs = f"{prediction.runs} `{prediction.rule}` run{'s' if prediction.runs > 1 else ''}"
    spread = (
        f", {approx(prediction.low)}–{approx(prediction.high)} over training"
        if prediction.low is not None and prediction.high is not None
        else ""
    )
    return (
        f"Predicted critical batch (gradient noise scale B_simple, median training mean of "
        f"{runs}) ≈ {approx(prediction.batch)}{spread}"
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
