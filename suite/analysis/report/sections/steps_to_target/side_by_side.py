"""Steps-to-target studies of different workloads side by side: where their answers agree and
where they do not. Two questions, each answered per workload from its own study:

* Does warmup extend linear scaling? The largest global batch up to which ``linear`` and
  ``linear_warmup`` each stay within ``KNEE_FACTOR`` of the LR oracle's steps (efficiency at
  least 1 / KNEE_FACTOR at every batch from the base batch up); warmup extends it where
  ``linear_warmup`` holds to a larger batch than ``linear``.
* Where is the knee relative to B_simple? The oracle's knee (2x perfect scaling) over the
  gradient noise scale near the target: near it (within 2x either way), above or below it.

Only where the results hold steps-to-target studies of two workloads or more: a report of one
workload shows nothing of this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from dpsuite.analysis.report import critical_batch_fit, render, studies, target_study
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.text import approx

FACTOR = critical_batch_fit.KNEE_FACTOR
NOT_RUN = "not run"


def holds_to(study: studies.TargetStudy, rule: str) -> int | None:
    """The largest batch up to which ``rule`` stays within FACTOR of the oracle's steps (the
    base batch where it fails at the first batch above it); None where the rule was not run
    above the base batch."""
    base = target_study.base_batch(study.group)
    eff = study.efficiency
    rows = eff[(eff["lr_rule"] == rule) & (eff["global_batch"] != base)]
    if rows.empty:
        return None
    held = base if base is not None else int(rows["global_batch"].min())
    for _, row in rows.sort_values("global_batch").iterrows():
        if row["efficiency"] < 1 / FACTOR:
            break
        held = int(row["global_batch"])
    return held


def warmup_verdict(linear: int | None, warm: int | None) -> str:
    """Whether warmup extends linear scaling, from the batches each holds to."""
    if linear is None or warm is None:
        return NOT_RUN
    if warm > linear:
        return "extends it"
    return "does not extend it" if warm == linear else "shortens it"


def knee_value(knee: critical_batch_fit.Knee | None) -> float | None:
    """The knee as one batch: interpolated, else the first batch beyond the factor."""
    if knee is None:
        return None
    return knee.batch if knee.batch is not None else knee.beyond


def knee_verdict(knee: float | None, b_simple: float | None) -> str:
    """The knee against B_simple in words (within FACTOR either way counts as near)."""
    if knee is None or b_simple is None or not b_simple > 0:
        return "not placed"
    ratio = knee / b_simple
    if ratio > FACTOR:
        return "above B_simple"
    return "below B_simple" if ratio < 1 / FACTOR else "near B_simple"


@dataclass
class Answers:
    """One workload's answers to the two questions."""

    workload: str
    target: str
    b_crit: float
    linear: int | None
    warm: int | None
    knee: float | None
    b_simple: float | None

    @property
    def warmup(self) -> str:
        return warmup_verdict(self.linear, self.warm)

    @property
    def knee_vs_b_simple(self) -> str:
        return knee_verdict(self.knee, self.b_simple)


def answers(study: studies.TargetStudy) -> Answers:
    return Answers(
        workload=str(study.group["workload"].iloc[0]),
        target=study.target_text,
        b_crit=study.fit.b_crit if study.fit is not None else math.nan,
        linear=holds_to(study, "linear"),
        warm=holds_to(study, "linear_warmup"),
        knee=knee_value(study.knee),
        b_simple=study.near.batch if study.near is not None else None,
    )


def one_per_workload(targets: list[studies.TargetStudy]) -> list[studies.TargetStudy]:
    """The largest study of each workload, in the order of the studies."""
    largest: dict[str, studies.TargetStudy] = {}
    for study in targets:
        name = str(study.group["workload"].iloc[0])
        if name not in largest or len(study.group) > len(largest[name].group):
            largest[name] = study
    return list(largest.values())


def section(targets: list[studies.TargetStudy]) -> Section:
    """The side-by-side finding and table, where two workloads or more have a study."""
    part = Section()
    per_workload = [answers(s) for s in one_per_workload(targets)]
    if len(per_workload) < 2:
        return part
    part.findings.append(finding(per_workload))
    part.tables.append(
        render.Table(
            "Workloads side by side: steps to target",
            table(per_workload),
            f"Per workload, its own study: `linear` and `linear_warmup` hold linear scaling up "
            f"to the largest global batch from which on, down to the base batch, they stay "
            f"within {FACTOR:g}× the LR oracle's steps; the knee is where the oracle leaves "
            f"{FACTOR:g}× perfect scaling, B_simple the gradient noise scale near the target.",
        )
    )
    return part


UNKNOWN = (NOT_RUN, "not placed")


def finding(per_workload: list[Answers]) -> str:
    """Where the workloads agree and where they do not, on the two questions."""
    names = ", ".join(f"{a.workload} to {a.target}" for a in per_workload)
    questions = [
        ("whether warmup extends linear scaling", [a.warmup for a in per_workload], warmup_text),
        ("where the knee is", [a.knee_vs_b_simple for a in per_workload], knee_text),
    ]
    said: dict[str, list[str]] = {
        "agree on": [],
        "do not agree on": [],
        "cannot be compared on": [],
    }
    for question, verdicts, text in questions:
        detail = "; ".join(f"{a.workload}: {text(a)}" for a in per_workload)
        if any(v in UNKNOWN for v in verdicts):
            kind = "cannot be compared on"
        else:
            kind = "agree on" if len(set(verdicts)) == 1 else "do not agree on"
        said[kind].append(f"{question} ({detail})")
    clauses = [f"they {kind} {' and '.join(items)}" for kind, items in said.items() if items]
    return f"Workloads side by side ({names}): {'; '.join(clauses)}."


def batch_text(batch: int | None) -> str:
    return "-" if batch is None else str(batch)


def warmup_text(a: Answers) -> str:
    if a.warmup == NOT_RUN:
        return "linear or linear_warmup not run above the base batch"
    return (
        f"warmup {a.warmup}, `linear` within {FACTOR:g}× of the oracle up to batch "
        f"{batch_text(a.linear)}, `linear_warmup` up to {batch_text(a.warm)}"
    )


def knee_text(a: Answers) -> str:
    if a.knee is None or a.b_simple is None or a.knee_vs_b_simple == "not placed":
        return "the knee or B_simple not placed"
    return (
        f"knee ≈ {approx(a.knee)}, {a.knee_vs_b_simple} ≈ {approx(a.b_simple)} "
        f"(knee / B_simple = {a.knee / a.b_simple:.2g})"
    )


def table(per_workload: list[Answers]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "workload": [a.workload for a in per_workload],
            "target": [a.target for a in per_workload],
            "B_crit (fitted)": [
                approx(a.b_crit) if math.isfinite(a.b_crit) else "-" for a in per_workload
            ],
            "linear holds to": [batch_text(a.linear) for a in per_workload],
            "linear_warmup holds to": [batch_text(a.warm) for a in per_workload],
            "warmup": [a.warmup for a in per_workload],
            "knee": [approx(a.knee) if a.knee is not None else "-" for a in per_workload],
            "B_simple": [approx(a.b_simple) if a.b_simple else "-" for a in per_workload],
            "knee vs B_simple": [a.knee_vs_b_simple for a in per_workload],
        }
    )
