"""Convergence at a fixed budget: final accuracy against global batch under each LR rule, the
training curves and learning rates, their table, findings and headline candidates."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dpsuite.analysis.report import data, render, seed_split, studies
from dpsuite.analysis.report.plots import (
    DIVERGED_MARKER,
    accuracy_axis,
    log2_axis,
    rule_color,
    styled,
)
from dpsuite.analysis.report.section import Plot, Section
from dpsuite.analysis.report.text import pct, slug

TOPIC = "Convergence"
PLOTS = ("accuracy_vs_batch", "training_curves", "lr_schedule")
# Headline candidates and their rank, lowest first across the sections (see `headline`): the
# suite's first question, how far the batch grows, leads.
HEADLINE = {"batch_limits": 10, "warmup_extension": 20}


def section(context: studies.Context) -> Section:
    """Each accuracy study (see `studies`) and one table of them all."""
    accuracy = context.accuracy
    part = Section()
    biggest = studies.largest(accuracy)
    base = data.baseline(biggest[1]) if biggest is not None else None
    if base is not None:
        acc = data.accuracy_table(biggest[1])
        part.candidate("batch_limits", batch_limits(acc, base))
        part.candidate("warmup_extension", warmup_extension(acc, base))
    if not context.has_runs or not accuracy:
        return part
    for label, group in accuracy:
        named = (f"-{slug(label)}", f" ({label})") if len(accuracy) > 1 else ("", "")
        study = accuracy_section(context.tree, group, *named)
        study.findings = [f"{label}: {s}" if len(accuracy) > 1 else s for s in study.findings]
        part.extend(study)
    acc = data.accuracy_table(pd.concat([group for _, group in accuracy]))
    table = acc.assign(
        acc_median_pct=100 * acc["acc_median"],
        acc_mean_pct=100 * acc["acc_mean"],
        acc_std_points=100 * acc["acc_std"],
    ).sort_values(["group", "lr_rule", "global_batch"])
    cols = [
        "group",
        "lr_rule",
        "global_batch",
        "acc_median_pct",
        "acc_mean_pct",
        "acc_std_points",
        "seeds",
        "diverged",
    ]
    if acc["group"].nunique() == 1:
        cols.remove("group")
    part.tables.append(render.Table("Final accuracy by LR rule and global batch", table[cols]))
    return part


def accuracy_section(
    tree: data.ResultsTree, group: pd.DataFrame, suffix: str, about: str
) -> Section:
    """Final accuracy against global batch under each rule, its training curves and LRs."""
    part = Section()
    acc = data.accuracy_table(group)
    base = data.baseline(group)
    seeds = int(acc["seeds"].max()) if len(acc) else 0
    epochs = group["epochs"].dropna()
    budget = f", {epochs.iloc[0]:g} epochs at every batch" if len(epochs) else ""
    part.plot(
        f"accuracy_vs_batch{suffix}",
        functools.partial(
            accuracy_vs_batch, group, acc, base, f"Final test accuracy vs global batch{about}"
        ),
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
    part.plot(
        f"training_curves{suffix}",
        functools.partial(
            training_curves, group, tree.epochs, batches, f"Test accuracy during training{about}"
        ),
        f"Training curves{about}",
        f"Test accuracy at each evaluation, per LR rule, at global batches "
        f"{', '.join(map(str, batches))} (lowest seed). ×: the run diverged after this point.",
    )
    part.plots += lr_plots(tree, group, suffix, about)
    part.findings += convergence_findings(acc, base)
    return part


def lr_plots(tree: data.ResultsTree, group: pd.DataFrame, suffix: str, about: str) -> list[Plot]:
    """The learning rate each rule applied at one global batch (none without LR records)."""
    batch = data.lr_batch(group)
    runs = data.one_run_per(group[group["global_batch"] == batch], ["lr_rule"])
    series = {r["lr_rule"]: data.lr_series(tree, r["run_id"]) for _, r in runs.iterrows()}
    series = {rule: s for rule, s in series.items() if len(s)}
    if not series:
        return []
    warm = runs[(runs["lr_rule"] == "linear_warmup") & runs["warmup_epochs"].notna()]
    warmup_end = None
    if len(warm) and "steps_per_epoch" in warm.columns:
        steps_per_epoch = pd.to_numeric(warm["steps_per_epoch"], errors="coerce").iloc[0]
        warmup_end = (
            float(warm["warmup_epochs"].iloc[0] * steps_per_epoch)
            if pd.notna(steps_per_epoch)
            else None
        )
    plot = Plot(
        f"lr_schedule{suffix}",
        functools.partial(lr_schedules, series, batch, warmup_end),
        f"Learning rate by step at global batch {batch}{about}",
        "The learning rate each rule applied (from steps.csv, sampled, and the evaluations in "
        "epochs.csv). `linear_warmup` ramps from the base LR to the scaled LR over its warmup.",
    )
    return [plot]


@styled
def accuracy_vs_batch(
    group: pd.DataFrame, acc: pd.DataFrame, base: data.Baseline | None, title: str
) -> Figure:
    """Final test accuracy against global batch, one line per rule, seed spread as error bars."""
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    if base is not None:
        lo, hi = 100 * base.acc - 1, 100 * base.acc + 1
        ax.axhspan(lo, hi, color="gray", alpha=0.18, lw=0)
        ax.axhline(100 * base.acc, color="gray", lw=1)
    for rule in data.rule_order(acc["lr_rule"]):
        r = acc[(acc["lr_rule"] == rule) & acc["acc_mean"].notna()].sort_values("global_batch")
        if r.empty:
            continue
        ax.errorbar(
            r["global_batch"],
            100 * r["acc_mean"],
            yerr=100 * r["acc_std"],
            fmt="o-",
            capsize=3,
            color=rule_color(rule),
            label=rule,
        )
    joined = base is not None and from_baseline(acc, base, ax)
    div = group[group["status"] == "diverged"]
    for rule, grp in div.groupby("lr_rule"):
        ax.plot(
            grp["global_batch"],
            100 * grp["last_finite_acc"].fillna(0),
            color=rule_color(rule),
            **DIVERGED_MARKER,
        )
    log2_axis(ax, group["global_batch"])
    accuracy_axis(ax)
    handles, labels = ax.get_legend_handles_labels()
    if base is not None:
        handles.append(Patch(color="gray", alpha=0.3))
        labels.append(f"batch-{base.batch} baseline ± 1 point")
    if joined:
        handles.append(Line2D([], [], color="gray", ls=":"))
        labels.append(f"from the batch-{base.batch} run (the base LR under every rule)")
    if not div.empty:
        handles.append(Line2D([], [], color="gray", **DIVERGED_MARKER))
        labels.append("diverged (at last finite eval)")
    ax.legend(handles, labels, title="LR rule", loc="best")
    ax.set_xlabel("global batch (samples per step)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(title)
    return fig


def from_baseline(acc: pd.DataFrame, base: data.Baseline, ax: Axes) -> bool:
    """Dotted from the baseline point to each rule that was not run at the baseline batch: at
    that batch every rule gives the base LR, so a sweep may train it once. True if any drawn."""
    drawn = False
    for rule in data.rule_order(acc["lr_rule"]):
        r = acc[(acc["lr_rule"] == rule) & acc["acc_mean"].notna()].sort_values("global_batch")
        if r.empty or rule in data.OWN_RECIPE_RULES or r["global_batch"].iloc[0] <= base.batch:
            continue
        ax.plot(
            [base.batch, r["global_batch"].iloc[0]],
            [100 * base.acc, 100 * r["acc_mean"].iloc[0]],
            ":",
            color=rule_color(rule),
        )
        drawn = True
    return drawn


@styled
def training_curves(
    group: pd.DataFrame, epochs: dict[str, pd.DataFrame], batches: list[int], title: str
) -> Figure | None:
    """Test accuracy against epoch for each rule, one panel per global batch."""
    runs = data.one_run_per(group[group["global_batch"].isin(batches)], ["global_batch", "lr_rule"])
    if not any(len(epochs.get(r, ())) for r in runs["run_id"]):
        return None
    fig = Figure(figsize=(4.2 * len(batches), 4.2))
    axes = fig.subplots(1, len(batches), sharey=True, squeeze=False)[0]
    for ax, batch in zip(axes, batches, strict=True):
        at = runs[runs["global_batch"] == batch]
        for rule in data.rule_order(at["lr_rule"]):
            run = at[at["lr_rule"] == rule].iloc[0]
            ep = epochs.get(run["run_id"], pd.DataFrame())
            finite = (
                ep[np.isfinite(ep["eval_loss"]) & np.isfinite(ep["eval_acc"])] if len(ep) else ep
            )
            if finite.empty:
                continue
            ax.plot(
                finite["epoch"], 100 * finite["eval_acc"], "-", color=rule_color(rule), label=rule
            )
            if run["status"] == "diverged":
                ax.plot(
                    finite["epoch"].iloc[-1],
                    100 * finite["eval_acc"].iloc[-1],
                    color=rule_color(rule),
                    **DIVERGED_MARKER,
                )
        ax.set_title(f"global batch {batch}")
        ax.set_xlabel("epoch")
        if group["epochs"].notna().any():  # the planned budget: early ends stay visible
            ax.set_xlim(0, float(group["epochs"].max()))
    accuracy_axis(axes[0])
    axes[0].set_ylabel("test accuracy (%)")
    legend: dict[str, object] = {}
    for ax in axes:  # panels may hold different rules: one legend for all
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    if (runs["status"] == "diverged").any():
        legend["diverged"] = Line2D([], [], color="gray", **DIVERGED_MARKER)
    axes[0].legend(list(legend.values()), list(legend.keys()), title="LR rule")
    fig.suptitle(title)
    return fig


@styled
def lr_schedules(series: dict[str, pd.DataFrame], batch: int, warmup_end: float | None) -> Figure:
    """The learning rate each rule used, step by step, at one large global batch."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for rule in data.rule_order(series):
        s = series[rule]
        ax.plot(s["step"], s["lr"], "-", color=rule_color(rule), label=rule)
    if warmup_end:
        ax.axvline(warmup_end, color="gray", ls=":", lw=1)
        ax.annotate(
            "end of warmup",
            (warmup_end, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -12),
            textcoords="offset points",
            color="gray",
        )
    ax.set_ylim(bottom=0)
    ax.legend(title="LR rule")
    ax.set_xlabel("training step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"Learning rate by step at global batch {batch}")
    return fig


ACCURACY_TOLERANCE = 0.01  # "holds the baseline" when within 1 point of it


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
        f"(median of {base.runs} run{'s' if base.runs > 1 else ''}{spread})."
    ]
    for rule in data.rule_order(acc["lr_rule"]):
        rows = scaled_rows(acc, rule, base)
        if not rows.empty:
            out.append(rule_finding(rule, rows, base))
    return out


def holds_baseline(rows: pd.DataFrame, base: data.Baseline) -> list[bool]:
    """Per row of an accuracy table: no run diverged and the seeds' median (`seed_split.median`)
    is within 1 point of base."""
    return [
        r["diverged"] == 0
        and pd.notna(r["acc_median"])
        and r["acc_median"] >= base.acc - ACCURACY_TOLERANCE
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
            f"batch tested, up to {largest} ({quoted(last)})."
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
    finished = rows[rows["acc_median"].notna()]
    beyond = finished[finished["global_batch"] >= batches[first_fail]]
    if not beyond.empty:
        worst = beyond.iloc[-1]
        tail.append(
            f"falls to {pct(worst['acc_median'])} at batch {worst['global_batch']}"
            + seed_split.describe(worst["acc_seeds"])
        )
    return head + ("; " + " and ".join(tail) if tail else "") + "."


WARMUP_GAIN = 0.01  # warmup "helps" where it beats plain linear scaling by more than a point


def batch_limits(acc: pd.DataFrame, base: data.Baseline) -> str | None:
    """Per rule, the largest global batch within 1 point of the baseline, rules grouped."""
    by_answer: dict[str, list[str]] = {}
    for rule in data.rule_order(acc["lr_rule"]):
        rows = scaled_rows(acc, rule, base)
        if rows.empty:
            continue
        largest = largest_holding(rows, base)
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
    warm = scaled_rows(acc, "linear_warmup", base).set_index("global_batch")
    linear = scaled_rows(acc, "linear", base).set_index("global_batch")
    both = warm.index.intersection(linear.index)
    if warm.empty or linear.empty or both.empty:
        return None
    # a rule whose runs all diverged has no mean: count it as no accuracy at all
    gain = warm.loc[both, "acc_median"] - linear.loc[both, "acc_median"].fillna(0.0)
    gain = gain.dropna()
    if gain.empty or gain.max() <= WARMUP_GAIN:
        return (
            "Warmup does not extend linear scaling here: `linear_warmup` is never more than "
            "1 point more accurate than `linear`."
        )
    w_ok = largest_holding(warm.reset_index(), base)
    l_ok = largest_holding(linear.reset_index(), base)
    head = "Warmup extends linear scaling"
    if w_ok is not None and (l_ok is None or w_ok > l_ok):
        head += f" from batch {l_ok or base.batch} to {w_ok}"
    batch = int(gain.idxmax())
    lin = linear.loc[batch]
    sentence = (
        f"{head}: at global batch {batch} `linear_warmup` keeps {quoted(warm.loc[batch])}"
        f" where `linear` {fate(lin)}"
    )
    later = warm[warm.index > batch]
    if len(later):
        nxt = later.iloc[0]
        if not holds_baseline(later.iloc[:1], base)[0]:
            sentence += f", but at {int(later.index[0])} warmup {fate(nxt, ' too')}"
    return sentence + "."


def quoted(row: pd.Series) -> str:
    """A setting's accuracy as the report quotes it: its seeds' median, and how they split."""
    return pct(row["acc_median"]) + seed_split.describe(row["acc_seeds"])


def fate(row: pd.Series, also: str = "") -> str:
    """``diverges`` (no seed completed) or ``falls to 10.0 %`` with how the seeds split."""
    if pd.isna(row["acc_median"]):
        return "diverges" + also
    return f"falls to {pct(row['acc_median'])}{also}" + seed_split.describe(row["acc_seeds"])
