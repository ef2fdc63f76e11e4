"""The convergence groups of a report, each studied as what it is, computed once for the report's
sections and its headline.

* An accuracy study (a fixed budget): final accuracy against global batch, under each rule.
* A steps-to-target study (runs stop at the target): censored steps per LR setting, the LR
  oracle and each rule's efficiency against it, the oracle's own checks (batches not known to
  be tuned, steps falling faster than perfect scaling), B_crit fitted to the oracle's curve
  beside the noise scale near the target, the knee of the oracle's curve, and time to target
  against worker count where this machine's scaling runs give step times. A fixed-budget group that
  recorded steps to a target is studied this way too when the results hold no group that
  stops at it (as results written before runs could stop).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dpsuite.analysis import scaling
from dpsuite.analysis.report import (
    b_crit_by_target,
    critical_batch_fit,
    data,
    fit_choices,
    target_study,
    time_to_target_table,
    warmup_axis,
)
from dpsuite.analysis.report.text import plural

Groups = list[tuple[str, pd.DataFrame]]


def split(conv: pd.DataFrame) -> tuple[Groups, Groups]:
    """(accuracy studies, steps-to-target studies), each a list of (label, runs)."""
    if conv.empty:
        return [], []
    groups = list(conv.groupby("group", sort=True))
    stopping = [(label, g) for label, g in groups if g["stops_at_target"].any()]
    budget = [(label, g) for label, g in groups if not g["stops_at_target"].any()]
    targets = stopping or [(label, g) for label, g in budget if target_study.has_target(g)]
    return budget, [part for label, g in targets for part in by_target_used(label, g)]


def by_target_used(label: str, group: pd.DataFrame) -> Groups:
    """A group split by the target its runs used (metric and value): steps to one target are
    not comparable with steps to another. One target keeps the label."""
    used = target_study.target_metric(group) + " " + target_study.target_values(group).astype(str)
    parts = list(group.groupby(used, sort=True))
    if len(parts) <= 1:
        return [(label, group)]
    return [(f"{label}, {target_text_of(g)}", g) for _, g in parts]


def target_text_of(group: pd.DataFrame) -> str:
    metric, value = target_study.target_of(group)
    return f"eval loss ≤ {value:g}" if metric == target_study.LOSS else f"{100 * value:g} %"


def largest(groups: Groups) -> tuple[str, pd.DataFrame] | None:
    return max(groups, key=lambda item: len(item[1]), default=None)


@dataclass
class TargetStudy:
    """Everything a report says about one steps-to-target group."""

    label: str
    group: pd.DataFrame
    target: float
    target_metric: str  # target_study.ACCURACY or LOSS
    settings: pd.DataFrame  # target_study.settings_table
    rules: pd.DataFrame  # target_study.rule_table
    best: pd.DataFrame  # target_study.oracle
    efficiency: pd.DataFrame  # target_study.efficiency
    untuned: pd.DataFrame  # target_study.untuned: too few LRs, or the best at the grid's edge
    faster: pd.DataFrame  # target_study.faster_than_perfect: the smaller batch is not tuned
    warmup: pd.DataFrame  # warmup_axis.warmup_oracle: the best with and without warmup
    fit: critical_batch_fit.CriticalFit | None  # S(B) = S_min + E_min / B on the oracle's curve
    spread: fit_choices.Spread | None  # B_crit under the alternative fit choices
    by_target: pd.DataFrame  # b_crit_by_target.by_target
    near: critical_batch_fit.NearTarget | None  # B_simple near the target, from the oracle's runs
    knee: critical_batch_fit.Knee | None
    trained: critical_batch_fit.Trained
    prediction: (
        critical_batch_fit.Prediction | None
    )  # pooled from the start of training (secondary)
    times: pd.DataFrame  # time_to_target_table.time_table (empty without scaling runs)
    model: scaling.ScalingModel | None  # the scaling model the times beyond measurements use

    @property
    def target_text(self) -> str:
        """The target in words: ``75 %`` (an accuracy), ``eval loss ≤ 0.35``."""
        if self.target_metric == target_study.LOSS:
            return f"eval loss ≤ {self.target:g}"
        return f"{100 * self.target:g} %"

    @property
    def goal_text(self) -> str:
        """The target on its split: ``75 % test accuracy``, ``validation loss ≤ 0.35``."""
        if self.target_metric == target_study.LOSS:
            return f"{self.split} loss ≤ {self.target:g}"
        return f"{self.target_text} {self.split} accuracy"

    @property
    def reached_text(self) -> str:
        """``the test accuracy reached 75 %``, ``the validation loss fell to 0.35``."""
        if self.target_metric == target_study.LOSS:
            return f"the {self.split} loss fell to {self.target:g}"
        return f"the {self.split} accuracy reached {self.target_text}"

    @property
    def on_validation(self) -> bool:
        """Whether steps to target were counted on a validation split (else on test)."""
        split = self.group.get("eval_split", pd.Series(dtype=object))
        return bool(len(split)) and bool((split == "validation").all())

    @property
    def split(self) -> str:
        return "validation" if self.on_validation else "test"

    def warnings(self) -> list[str]:
        """What the report must not keep silent: the batches the oracle cannot vouch for."""
        out = []
        for _, row in self.untuned.iterrows():
            why = (
                f"only {plural(int(row['lrs']), 'LR')} tried"
                if row["too_few_lrs"]
                else f"its best LR ({row['peak_lr']:.3g}) is at the edge of the LRs tried"
            )
            out.append(
                f"steps to target ({self.label}): global batch {int(row['global_batch'])} is "
                f"not known to be tuned: {why}"
            )
        return out

    @property
    def epochs(self) -> float | None:
        budget = self.group["epochs"].dropna()
        return float(budget.max()) if len(budget) else None


def analyse(
    tree: data.ResultsTree, label: str, group: pd.DataFrame, fits: list[scaling.Fit]
) -> TargetStudy:
    settings = target_study.settings_table(group)
    rules = target_study.rule_table(settings)
    best = target_study.oracle(settings)
    trained = critical_batch_fit.trained_runs(group, tree.epochs)
    seeds = target_study.seed_steps(group)
    faster = target_study.faster_than_perfect(best, seeds)
    machine, workload = group["machine"].iloc[0], group["workload"].iloc[0]
    model = time_to_target_table.model_for(fits, machine, workload)
    step_times = time_to_target_table.step_time_table(
        time_to_target_table.measured_steps(tree.runs, machine, workload),
        model,
        sorted(best["global_batch"]),
    )
    metric, target = target_study.target_of(group)
    fit = critical_batch_fit.fit_critical_batch(
        best, seeds, fit_choices.not_tuned(best, seeds), granularity=fit_choices.granularity(group)
    )
    curves = pd.concat(
        [
            best.assign(curve=time_to_target_table.ORACLE)[["curve", "global_batch", "steps"]],
            rules.rename(columns={"lr_rule": "curve"})[["curve", "global_batch", "steps"]],
        ]
    )
    return TargetStudy(
        label=label,
        group=group,
        target=target,
        target_metric=metric,
        settings=settings,
        rules=rules,
        best=best,
        efficiency=target_study.efficiency(rules, best),
        untuned=target_study.untuned(best),
        faster=faster,
        warmup=warmup_axis.warmup_oracle(group, settings),
        fit=fit,
        spread=fit_choices.spread(group, fit, best, seeds) if fit else None,
        by_target=b_crit_by_target.by_target(group, tree.epochs),
        near=critical_batch_fit.predict_near_target(
            target_study.oracle_runs(group, best), tree.epochs
        ),
        knee=critical_batch_fit.find_knee(best),
        trained=trained,
        prediction=critical_batch_fit.predict(trained.runs),
        times=time_to_target_table.time_table(curves, step_times),
        model=model,
    )


def scaling_fits(tree: data.ResultsTree) -> list[scaling.Fit]:
    """The scaling model fitted per machine and workload, where the results allow."""
    if tree.runs.empty or tree.comm.empty:
        return []
    return scaling.fit_all(tree.runs, tree.comm)[0]


@dataclass
class Context:
    """What every section of a report reads: the results tree and the studies of it, computed
    once (``scaling``: `data.scaling_table` of the tree's runs)."""

    tree: data.ResultsTree
    scaling: pd.DataFrame
    fits: list[scaling.Fit]
    accuracy: Groups
    targets: list[TargetStudy]

    @property
    def has_runs(self) -> bool:
        return not self.tree.runs.empty


def context(tree: data.ResultsTree) -> Context:
    """Study ``tree`` once; the warnings of its steps-to-target studies join the tree's."""
    fits = scaling_fits(tree)
    table = data.scaling_table(tree.runs) if not tree.runs.empty else pd.DataFrame()
    accuracy, target_groups = split(data.convergence_runs(tree.runs))
    targets = [analyse(tree, label, group, fits) for label, group in target_groups]
    tree.warnings += [warning for study in targets for warning in study.warnings()]
    return Context(tree, table, fits, accuracy, targets)
