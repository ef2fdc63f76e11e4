"""Steps to target: per steps-to-target study (see `studies`), the steps of each LR rule and of
the LR oracle (`oracle`), its critical batch (`critical_batch`) and its time to target
(`time_to_target`), one topic of the report; the largest study gives the headline candidates.
Studies of two workloads or more are then compared (`side_by_side`)."""

from __future__ import annotations

from dpsuite.analysis.report import data, studies
from dpsuite.analysis.report.section import Section
from dpsuite.analysis.report.sections.steps_to_target import (
    critical_batch,
    noise_scale,
    oracle,
    side_by_side,
    time_to_target,
    warmup,
)
from dpsuite.analysis.report.text import slug

TOPIC = "Steps to target"
PLOTS = (*oracle.PLOTS, *noise_scale.PLOTS, *critical_batch.PLOTS, *time_to_target.PLOTS)
# Headline candidates and their rank (see `headline`): the deeper convergence answers, after
# the suite's two questions (convergence, scaling).
HEADLINE = {"knee_and_prediction": 40, "time_to_target": 50, "oracle_efficiency": 60}


def section(context: studies.Context) -> Section:
    """Each steps-to-target study, its findings prefixed with its label where there are
    several."""
    targets = context.targets
    part = Section()
    largest = max(targets, key=lambda s: len(s.group), default=None)
    if largest is not None:
        part.candidate("knee_and_prediction", critical_batch.knee_and_prediction(largest))
        part.candidate("time_to_target", time_to_target.fastest_headline(largest))
        part.candidate("oracle_efficiency", oracle.oracle_efficiency(largest))
    if not context.has_runs:
        return part
    for study in targets:
        named = (f"-{slug(study.label)}", f" ({study.label})") if len(targets) > 1 else ("", "")
        one = study_section(study, context.tree, *named)
        one.findings = [f"{study.label}: {s}" if len(targets) > 1 else s for s in one.findings]
        part.extend(one)
    part.extend(side_by_side.section(targets))  # two workloads or more: where they agree
    return part


def study_section(
    study: studies.TargetStudy, tree: data.ResultsTree, suffix: str, about: str
) -> Section:
    """Steps to target per rule and for the LR oracle, efficiency, knee and critical batch,
    time to target; the oracle's table last."""
    part = oracle.study_section(study, suffix, about)
    part.extend(warmup.study_section(study, about))
    part.extend(critical_batch.study_section(study, tree, suffix, about))
    part.extend(time_to_target.study_section(study, suffix, about))
    part.tables.append(oracle.table(study, about))
    return part
