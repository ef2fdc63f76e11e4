"""The headline of a report: at most five sentences a reader acts on, computed from the tables.

In order of priority, as many as fit: the largest global batch each LR rule takes within 1 point
of the small-batch accuracy; how far warmup extends linear scaling; the best and worst scaling
efficiency at the largest worker count not oversubscribed and what limits them; the knee of
steps to target beside the critical batch the noise scale predicts; the fastest way to the
target on this machine; each rule's efficiency against the LR oracle at the largest batch the
oracle reached; the all-reduce bus bandwidth. Failed runs always take the last place. The
findings below the headline hold the details.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.analysis.report import critical_batch as cb
from suite.analysis.report import data, findings, studies
from suite.analysis.report import time_to_target as ttt
from suite.analysis.report.findings import pct
from suite.analysis.report.plots import approx, human_bytes
from suite.analysis.report.render import HEADLINE_MAX

WARMUP_GAIN = 0.01  # warmup "helps" where it beats plain linear scaling by more than a point


def headline(
    tree: data.ResultsTree,
    scaling: pd.DataFrame,
    accuracy: studies.Groups,
    targets: list[studies.TargetStudy],
) -> list[str]:
    """The sentences, from the largest accuracy and steps-to-target studies and every scaling
    series (``scaling``: `data.scaling_table` of the tree's runs)."""
    runs = tree.runs
    biggest = studies.largest(accuracy)
    study = max(targets, key=lambda s: len(s.group), default=None)
    base = data.baseline(biggest[1]) if biggest is not None else None
    acc = data.accuracy_table(biggest[1]) if base is not None else None
    # The suite's two questions first (how far the batch grows, how far it scales and why),
    # then the deeper convergence answers; five at most, so the later ones give way.
    sentences = [
        batch_limits(acc, base) if base is not None else None,
        warmup_extension(acc, base) if base is not None else None,
        scaling_limit(scaling),
        knee_and_prediction(study) if study is not None else None,
        time_to_target(study) if study is not None else None,
        oracle_efficiency(study) if study is not None else None,
        bandwidth(tree.comm, scaling, runs),
    ]
    chosen = [s for s in sentences if s]
    failed = int((runs["status"] == "failed").sum()) if not runs.empty else 0
    if failed:
        chosen = chosen[: HEADLINE_MAX - 1]
        chosen.append(f"{failed} of {len(runs)} runs failed; they are listed under Failed runs.")
    return chosen[:HEADLINE_MAX]


def batch_limits(acc: pd.DataFrame, base: data.Baseline) -> str | None:
    """Per rule, the largest global batch within 1 point of the baseline, rules grouped."""
    by_answer: dict[str, list[str]] = {}
    for rule in data.rule_order(acc["lr_rule"]):
        rows = findings.scaled_rows(acc, rule, base)
        if rows.empty:
            continue
        largest = findings.largest_holding(rows, base)
        if largest is not None:
            answer = str(largest)
        elif rule in data.OWN_RECIPE_RULES:
            answer = "none"
        else:
            answer = f"only {base.batch}"
        by_answer.setdefault(answer, []).append(f"`{rule}`")
    if not by_answer:
        return None
    order = sorted(by_answer, key=lambda a: -int(a) if a.isdigit() else 0)
    parts = [f"{answer} with {' and '.join(by_answer[answer])}" for answer in order]
    return (
        f"Largest global batch within 1 point of the batch-{base.batch} accuracy "
        f"({pct(base.acc)}): {'; '.join(parts)}."
    )


def warmup_extension(acc: pd.DataFrame, base: data.Baseline) -> str | None:
    """Where `linear_warmup` does better than `linear`, and where it stops doing so."""
    warm = findings.scaled_rows(acc, "linear_warmup", base).set_index("global_batch")
    linear = findings.scaled_rows(acc, "linear", base).set_index("global_batch")
    both = warm.index.intersection(linear.index)
    if warm.empty or linear.empty or both.empty:
        return None
    # a rule whose runs all diverged has no mean: count it as no accuracy at all
    gain = warm.loc[both, "acc_mean"] - linear.loc[both, "acc_mean"].fillna(0.0)
    gain = gain.dropna()
    if gain.empty or gain.max() <= WARMUP_GAIN:
        return (
            "Warmup does not extend linear scaling here: `linear_warmup` is never more than "
            "1 point more accurate than `linear`."
        )
    w_ok = findings.largest_holding(warm.reset_index(), base)
    l_ok = findings.largest_holding(linear.reset_index(), base)
    head = "Warmup extends linear scaling"
    if w_ok is not None and (l_ok is None or w_ok > l_ok):
        head += f" from batch {l_ok or base.batch} to {w_ok}"
    batch = int(gain.idxmax())
    lin = linear.loc[batch]
    fate = "diverges" if pd.isna(lin["acc_mean"]) else f"falls to {pct(lin['acc_mean'])}"
    sentence = (
        f"{head}: at global batch {batch} `linear_warmup` keeps {pct(warm.loc[batch, 'acc_mean'])}"
        f" where `linear` {fate}"
    )
    later = warm[warm.index > batch]
    if len(later):
        nxt = later.iloc[0]
        if not findings.holds_baseline(later.iloc[:1], base)[0]:
            end = "diverges" if pd.isna(nxt["acc_mean"]) else f"falls to {pct(nxt['acc_mean'])}"
            sentence += f", but at {int(later.index[0])} warmup {end} too"
    return sentence + "."


def scaling_limit(scaling: pd.DataFrame) -> str | None:
    """Best and worst efficiency at the largest worker count that was not oversubscribed, and
    the step time each spends computing and waiting for the all-reduce."""
    if scaling.empty:
        return None
    more = scaling[scaling["workers"] > scaling["base_workers"]]
    fair = more[~more["oversubscribed"]]
    pick = fair if len(fair) else more
    n = int(pick["workers"].max())
    at = pick[pick["workers"] == n]
    best = at.loc[at["efficiency"].idxmax()]
    worst = at.loc[at["efficiency"].idxmin()]
    sentence = (
        f"At {n} workers {best['series']} reaches {pct(best['efficiency'], 0)} scaling "
        f"efficiency{step_parts(best)}"
    )
    if len(at) > 1:
        sentence += (
            f"; {worst['series']} only {pct(worst['efficiency'], 0)}"
            f"{step_parts(worst, per_step='')}" + limited_by(best, worst)
        )
    crowded = sorted(int(w) for w in more[more["oversubscribed"]]["workers"].unique())
    if crowded and len(fair):
        counts = ", ".join(map(str, crowded))
        sentence += (
            f"; runs at {counts} workers had more worker threads than cores (oversubscribed, "
            "drawn hollow) and measure contention"
        )
    elif crowded:
        sentence += "; these runs had more worker threads than cores and measure contention"
    return sentence + "."


def step_parts(row: pd.Series, per_step: str = " per step") -> str:
    if pd.isna(row["compute_time_s"]) or pd.isna(row["exposed_comm_s"]):
        return ""
    return (
        f" ({ms(row['compute_time_s'])} of compute and {ms(max(row['exposed_comm_s'], 0))} of "
        f"exposed all-reduce{per_step})"
    )


def limited_by(best: pd.Series, worst: pd.Series) -> str:
    """Why the worst series scales worse, when the step-time split says so."""
    try:
        worst_share = worst["exposed_comm_s"] / worst["step_time_s"]
        best_share = best["exposed_comm_s"] / best["step_time_s"]
    except (TypeError, ZeroDivisionError):
        return ""
    if pd.isna(worst_share) or pd.isna(best_share) or worst_share <= best_share:
        return ""
    return ": its compute is too short to hide the all-reduce behind"


def ms(seconds: float) -> str:
    value = 1e3 * seconds
    return f"{value:.0f} ms" if value >= 10 else f"{value:.2g} ms"


def bandwidth(comm: pd.DataFrame, scaling: pd.DataFrame, runs: pd.DataFrame) -> str | None:
    """Peak busbw of the widest benchmark that was not oversubscribed, and the busbw at the
    message size of the worst-scaling workload's gradient."""
    comm = comm[comm["collective"] == "all_reduce"] if not comm.empty else comm
    if comm.empty:
        return None
    over = comm.get("hardware.oversubscribed", pd.Series(False, index=comm.index)).eq(True)
    pool = comm[~over] if (~over).any() else comm
    widest = pool[pool["world_size"] == pool["world_size"].max()]
    bench = widest[widest["bench_id"] == widest["bench_id"].iloc[0]]
    peak = bench.loc[bench["busbw_GBps"].idxmax()]
    machine = f" on {peak['machine']}" if comm["machine"].nunique() > 1 else ""
    sentence = (
        f"All-reduce bus bandwidth{machine} ({int(peak['world_size'])} ranks, {peak['backend']}) "
        f"peaks at {peak['busbw_GBps']:.2f} GB/s with {human_bytes(peak['size_bytes'])} messages"
    )
    gradient = gradient_bytes(scaling, runs)
    if gradient is not None:
        workload, size = gradient
        near = bench.loc[(bench["size_bytes"] / size).map(lambda r: abs(math.log(r))).idxmin()]
        if near["size_bytes"] != peak["size_bytes"]:
            sentence += (
                f", but reaches {near['busbw_GBps']:.2f} GB/s at {human_bytes(near['size_bytes'])},"
                f" about one {workload} gradient ({human_bytes(round(size))})"
            )
    return sentence + "."


def gradient_bytes(scaling: pd.DataFrame, runs: pd.DataFrame) -> tuple[str, float] | None:
    """The worst-scaling workload and the bytes its runs all-reduce per step."""
    if scaling.empty or "wire_bytes_per_step" not in runs.columns:
        return None
    more = scaling[scaling["workers"] > scaling["base_workers"]]
    if more.empty:
        return None
    workload = more.loc[more["efficiency"].idxmin(), "workload"]
    sent = runs[(runs["workload"] == workload) & (runs["wire_bytes_per_step"] > 0)][
        "wire_bytes_per_step"
    ]
    return (workload, float(sent.median())) if len(sent) else None


def oracle_efficiency(study: studies.TargetStudy) -> str | None:
    """Each rule's efficiency against the LR oracle at the largest batch the oracle reached."""
    reached = study.best[np.isfinite(study.best["steps"])]
    if len(reached) < 2:
        return None
    batch = int(reached["global_batch"].iloc[-1])
    at = study.efficiency[study.efficiency["global_batch"] == batch]
    if at.empty:
        return None
    order = at.sort_values("efficiency", ascending=False)
    scored = [
        f"`{r}` {pct(e, 0)}"
        for r, e in zip(order["lr_rule"], order["efficiency"], strict=True)
        if e > 0
    ]
    never = [r for r, e in zip(order["lr_rule"], order["efficiency"], strict=True) if e == 0]
    steps = reached["steps"].iloc[-1]
    sentence = (
        f"At global batch {batch}, against the best of the LRs tried ({steps:,.0f} steps to "
        f"{pct(study.target, 0)}), the rules' efficiency is"
    )
    sentence += " " + ", ".join(scored) if scored else ""
    if never:
        joined = findings.rules_text(data.rule_order(never))
        sentence += (
            "; " if scored else " nil: "
        ) + f"{joined} never reach{'es' if len(never) == 1 else ''} it"
    return sentence + "."


def knee_and_prediction(study: studies.TargetStudy) -> str | None:
    """The fitted critical batch beside the noise scale near the target (or, without a fit,
    where steps to target leave perfect scaling)."""
    fit, near = study.fit, study.near
    untuned = sorted(int(b) for b in study.faster["global_batch"])
    left_out = (
        f"batch {', '.join(map(str, untuned))} left out: steps fell faster than perfect "
        "scaling from it, so it is not tuned"
        if untuned
        else ""
    )
    if fit is not None:
        sentence = (
            f"Critical batch fitted to the best LR's steps to {pct(study.target, 0)}: B_crit = "
            f"E_min / S_min ≈ {approx(fit.b_crit)} ({findings.interval_text(fit.b_crit_ci)}"
            + (f"; {left_out})" if left_out else ")")
        )
        if near is not None and math.isfinite(fit.b_crit):
            sentence += (
                f"; the gradient noise scale near the target predicts ≈ {approx(near.batch)} "
                f"({findings.interval_text((near.low, near.high))}): predicted / fitted = "
                f"{near.batch / fit.b_crit:.2g}"
            )
        flagged = sorted(set(map(int, study.untuned["global_batch"])) - set(untuned))
        if flagged:
            sentence += (
                f"; an estimate: batch {', '.join(map(str, flagged))} not known to be tuned "
                "(too few LRs, or the best at the edge of those tried)"
            )
        return sentence + "."
    knee = study.knee
    if knee is None:
        return None
    band = f"{cb.KNEE_FACTOR:g}× perfect scaling"
    if knee.batch is not None:
        found = f"leave {band} at global batch ≈ {approx(knee.batch)}"
    elif knee.beyond is not None:
        found = f"leave {band} between global batch {knee.within} and {knee.beyond}"
    elif knee.placed:
        found = f"stay within {band} up to global batch {knee.within}, the largest measured"
    else:
        found = f"stay within {band} up to global batch {knee.within}; the budget cannot tell more"
    caveat = f" ({left_out})" if left_out else ""
    return f"Steps to {pct(study.target, 0)} (best LR per batch) {found}{caveat}."


def time_to_target(study: studies.TargetStudy) -> str | None:
    """The fastest measured way to the target on this machine, and the model's, if faster."""
    if study.times.empty:
        return None
    best = ttt.fastest(study.times, ttt.ORACLE)
    if best.measured is None:
        return None
    row = best.measured
    return (
        f"On this machine {pct(study.target, 0)} is reached fastest with {ttt.point(row)} "
        f"({ttt.seconds(row['time_s'])} of training steps at the best LR)"
        + findings.predicted_clause(best.predicted, study.model)
        + "."
    )
