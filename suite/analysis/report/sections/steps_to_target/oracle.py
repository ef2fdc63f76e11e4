"""Steps to target of one study, per LR rule and for the LR oracle: their plot, each rule's
efficiency against the oracle, the oracle's table, its findings and headline candidate."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dpsuite.analysis.report import critical_batch_fit, data, render, studies, target_study
from dpsuite.analysis.report.plots import (
    FIT_COLOR,
    NEVER_MARKER,
    ORACLE_COLOR,
    ORACLE_LINE,
    draw_never,
    log2_axis,
    percent_axis,
    perfect_line,
    rule_color,
    steps_axes,
    styled,
    target_label,
)
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.target_study import MIN_LRS
from dpsuite.analysis.report.text import approx, pct, plural, rules_text, steps_text

PLOTS = ("steps_to_target", "rule_efficiency")


def study_section(study: studies.TargetStudy, suffix: str, about: str) -> Section:
    """Steps to target per rule and for the LR oracle, each rule's efficiency; their findings."""
    part = Section()
    target = study.target_text
    fit = study.fit
    part.plot(
        f"steps_to_target{suffix}",
        functools.partial(
            steps_to_target,
            study.rules,
            study.best,
            study.knee,
            f"Steps to {target}{about}",
            fit=fit,
            goal=study.goal_text,
        ),
        f"Steps to {study.goal_text} vs global batch{about}",
        steps_caption(study),
    )
    part.plot(
        f"rule_efficiency{suffix}",
        functools.partial(
            rule_efficiency, study.efficiency, f"LR rules against the LR oracle{about}"
        ),
        f"Efficiency of each LR rule against the LR oracle{about}",
        f"The oracle's steps to {target} divided by the rule's, per global batch: 100 % is "
        "as few steps as the best LR tried there; 0 % (▲): the rule's median never reaches "
        "the target.",
    )
    part.findings += target_findings(study)
    return part


def table(study: studies.TargetStudy, about: str) -> render.Table:
    """The LR oracle per global batch: its steps, LR and seeds (`oracle_table`)."""
    target = study.target_text
    return render.Table(
        f"LR oracle: fewest steps to {target} per global batch{about}",
        oracle_table(study),
        note="next_lr_below and next_lr_above: the peak LRs tried nearest to the best on either "
        "side, each with its fewest seed-median steps there (with or without warmup): a best LR "
        "with a slower LR tried on both sides is bracketed on the LR axis (equal steps: a "
        "plateau over both LRs, which evaluations at whole intervals make common).",
    )


def steps_caption(study: studies.TargetStudy) -> str:
    """What the steps-to-target plot draws: how steps are counted, the oracle and the fit."""
    budget = f"{study.epochs:g}-epoch budget" if study.epochs else "budget"
    fit = study.fit
    return (
        f"Median over seeds of the optimizer steps until {study.reached_text}"
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
            f"{approx(fit.b_crit)})."
            if fit is not None
            else ""
        )
    )


def reach_window(study: studies.TargetStudy) -> int:
    """Evaluations whose median counts as reaching the target (1 in older results)."""
    window = pd.to_numeric(
        study.group.get("config.train.target_evals", pd.Series(dtype=float)), errors="coerce"
    ).dropna()
    return int(window.max()) if len(window) else 1


SAME_LR = 1.01  # peak LRs closer than this ratio are one LR for the bracket


def lr_neighbours(settings: pd.DataFrame, batch: int, best_lr: float) -> tuple[str, str]:
    """The distinct peak LRs tried next below and next above the oracle's at ``batch``, each
    with its fewest seed-median steps ("0.035: 2,400"), or "none tried": what brackets the
    best on the LR axis."""
    if pd.isna(best_lr):
        return "", ""
    grp = settings[settings["global_batch"] == batch]
    rounded = grp["peak_lr"].map(lambda p: float(f"{p:.6g}"))
    best = float(f"{best_lr:.6g}")
    # Within 1 % is the best LR itself under another setting (the grid's 0.283, the sqrt
    # rule's 0.28284 with warmup): the bracket is the next LR beyond it on either side.
    below, above = rounded[rounded < best / SAME_LR], rounded[rounded > best * SAME_LR]

    def side(lrs: pd.Series, nearest: float | None) -> str:
        if nearest is None:
            return "none tried"
        steps = grp.loc[lrs.index[lrs == nearest], "steps"].min()
        return f"{nearest:.3g}: {steps_text(float(steps))}"

    return (
        side(below, below.max() if len(below) else None),
        side(above, above.min() if len(above) else None),
    )


def oracle_table(study: studies.TargetStudy) -> pd.DataFrame:
    best = study.best
    neighbours = [
        lr_neighbours(study.settings, int(b), lr)
        for b, lr in zip(best["global_batch"], best["peak_lr"], strict=True)
    ]
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
            "steps": [steps_text(s) for s in best["steps"]],
            "perfect_scaling_steps": perfect,
            "fitted_steps": fitted,
            "best_lr_setting": best["setting"].fillna(""),
            "peak_lr": best["peak_lr"],
            "next_lr_below": [below for below, _ in neighbours],
            "next_lr_above": [above for _, above in neighbours],
            "seeds_reached": [
                f"{r} of {n}" for r, n in zip(best["reached"], best["seeds"], strict=True)
            ],
            "lr_settings_tried": best["tried"],
            "distinct_lrs": best["lrs"],
            "not_tuned": flags,
            "budget_steps": best["budget_steps"],
        }
    ).dropna(axis=1, how="all")


@styled
def steps_to_target(
    rules: pd.DataFrame,
    best: pd.DataFrame,
    knee: critical_batch_fit.Knee | None,
    title: str,
    fit: critical_batch_fit.CriticalFit | None = None,
    goal: str = "the target",
) -> Figure | None:
    """Seed-median steps to target against global batch (log-log) per rule and for the LR
    oracle, with perfect scaling and the fitted S(B) = S_min + E_min / B; a median that is
    never (∞) is a triangle at the top."""
    finite = best[np.isfinite(best["steps"])]
    if finite.empty or best["global_batch"].nunique() < 2:
        return None
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    every = pd.concat([rules["steps"], best["steps"]])
    top = steps_axes(ax, best["global_batch"], every[np.isfinite(every)])
    # The oracle first, wide and pale: a rule that is the best LR somewhere runs along it.
    curves = [("LR oracle (fewest steps over the LRs tried)", best, ORACLE_COLOR, ORACLE_LINE)]
    curves += [
        (rule, rules[rules["lr_rule"] == rule], rule_color(rule), {"marker": "o", "ms": 5})
        for rule in data.rule_order(rules["lr_rule"])
    ]
    never: list[tuple[float, str]] = []
    for label, rows, color, style in curves:
        ok = rows[np.isfinite(rows["steps"])]
        ax.plot(ok["global_batch"], ok["steps"], color=color, label=label, **style)
        never += [(b, color) for b in rows[~np.isfinite(rows["steps"])]["global_batch"]]
    draw_never(ax, never, top)
    if knee is not None:
        perfect_line(ax, knee, np.array(sorted(best["global_batch"]), dtype=float))
    if fit is not None:
        xs = np.geomspace(float(best["global_batch"].min()), float(best["global_batch"].max()))
        ax.plot(
            xs,
            [fit.steps(x) for x in xs],
            ":",
            color=FIT_COLOR,
            lw=1.8,
            label=f"fit S_min + E_min/B (B_crit ≈ {approx(fit.b_crit)})",
        )
    handles, labels = ax.get_legend_handles_labels()
    if len(never):
        handles.append(Line2D([], [], color="gray", **NEVER_MARKER))
        labels.append("median never reaches it (half the seeds or more missed)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_ylabel(target_label(goal))
    ax.set_title(title)
    return fig


@styled
def rule_efficiency(efficiency: pd.DataFrame, title: str) -> Figure | None:
    """Each rule's efficiency against the LR oracle (oracle steps / its steps) per batch."""
    if efficiency.empty or efficiency["global_batch"].nunique() < 2:
        return None
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot()
    ax.axhline(100, color="black", lw=1, ls="--", label="as few steps as the oracle")
    never: list[tuple[float, str]] = []
    for rule in data.rule_order(efficiency["lr_rule"]):
        rows = efficiency[efficiency["lr_rule"] == rule].sort_values("global_batch")
        color = rule_color(rule)
        ax.plot(rows["global_batch"], 100 * rows["efficiency"], "o-", color=color, label=rule)
        never += [(b, color) for b in rows[rows["efficiency"] == 0]["global_batch"]]
    draw_never(ax, never, 0)
    log2_axis(ax, efficiency["global_batch"])
    ax.set_ylim(-4, 110)
    percent_axis(ax)
    handles, labels = ax.get_legend_handles_labels()
    if len(never):
        handles.append(Line2D([], [], color="gray", **NEVER_MARKER))
        labels.append("never reaches the target (0 %)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    ax.set_xlabel("global batch (samples per step)")
    ax.set_ylabel("efficiency: oracle steps / rule steps (%)")
    ax.set_title(title)
    return fig


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
    runs = target_study.oracle_runs(study.group, study.best)
    acc = pd.to_numeric(runs.get("final_test_acc", pd.Series(dtype=float)), errors="coerce")
    if acc.notna().any():
        sentence += (
            f": the LR oracle's runs end at {pct(float(acc.median()), 1)} test accuracy "
            f"(median of {plural(int(acc.notna().sum()), 'run')})"
        )
    return [sentence + "."]


def oracle_findings(study: studies.TargetStudy) -> list[str]:
    best = study.best
    reached = best[np.isfinite(best["steps"])]
    if reached.empty:
        return [f"No run reached {study.goal_text} at any global batch."]
    lrs = best["lrs"].astype(int)
    counts = f"{lrs.min()}" if lrs.min() == lrs.max() else f"{lrs.min()}–{lrs.max()}"
    sentence = (
        f"LR oracle (at each global batch the fewest seed-median steps over the {counts} "
        f"distinct peak LRs tried there): {study.goal_text} in "
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
        tried = target_study.distinct_lrs(
            study.settings[study.settings["global_batch"] == batch]["peak_lr"]
        )
        listed = ", ".join(f"{lr:.3g}" for lr in tried)
        if row["too_few_lrs"]:
            out.append(
                f"At global batch {batch} only {plural(len(tried), 'peak LR')} ({listed}) "
                f"{'was' if len(tried) == 1 else 'were'} tried, fewer than "
                f"{MIN_LRS}: the oracle there is not tuned, and every ratio to it is suspect."
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
    runs = target_study.finished_runs(study.group)
    missed = int((~np.isfinite(runs["steps"])).sum())
    if not missed:
        return []
    budget = f"the {study.epochs:g}-epoch budget" if study.epochs else "the budget"
    sentence = (
        f"{missed} of {len(runs)} runs did not reach {study.target_text} within {budget} "
        "(or diverged first); each counts as never reaching it, so a seed median is never "
        "where half the seeds or more missed"
    )
    rules = study.rules[
        ~np.isfinite(study.rules["steps"]) & (study.rules["setting"] != target_study.BASE_SETTING)
    ]
    parts = [
        f"{rules_text(data.rule_order(grp['lr_rule']))} at {int(batch)}"
        for batch, grp in rules.groupby("global_batch", sort=True)
    ]
    grid = study.settings[study.settings["lr_rule"] == target_study.GRID_RULE]
    grid_never = int((~np.isfinite(grid["steps"])).sum())
    if grid_never:
        parts.append(f"{grid_never} of the {len(grid)} (LR, batch) points of the `power` grid")
    return [sentence + (": " + "; ".join(parts) if parts else "") + "."]


def efficiency_findings(study: studies.TargetStudy) -> list[str]:
    """Per rule, its efficiency against the oracle at every batch above the base batch."""
    eff = study.efficiency
    base = target_study.base_batch(study.group)
    eff = eff[eff["global_batch"] != base] if base is not None else eff
    out = []
    for rule in data.rule_order(eff["lr_rule"]):
        rows = eff[eff["lr_rule"] == rule].sort_values("global_batch")
        out.append(
            f"`{rule}` against the LR oracle (oracle steps / its steps to "
            f"{study.target_text}): {efficiency_list(rows)}."
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
        f"{study.target_text}), the rules' efficiency is"
    )
    sentence += " " + ", ".join(scored) if scored else ""
    if never:
        joined = rules_text(data.rule_order(never))
        sentence += (
            "; " if scored else " nil: "
        ) + f"{joined} never reach{'es' if len(never) == 1 else ''} it"
    return sentence + "."
