"""The headline of `dpsuite report` (at most five sentences, by the sections' ranks) and its
findings grouped by topic."""

from __future__ import annotations

from dpsuite.analysis.report import build
from tests import report_trees as trees
from tests.report_expected import (
    expected_accuracy_findings,
    expected_scaling_findings,
    expected_scaling_headline,
    expected_target_findings,
    matches,
)
from tests.report_pages import (
    headline_of,
    topics_of,
)


def expected_headline_start() -> str:
    """The accuracy sentence, hand-derived from trees.ACCURACY."""
    return (
        "Largest global batch within 1 point of the batch-32 accuracy (91.0 %): 128 with "
        "`linear_warmup`; 64 with `linear`; only 32 with `naive`."
    )


def expected_warmup_headline() -> str:
    acc = trees.ACCURACY
    return (
        "Warmup extends linear scaling from batch 64 to 128: at global batch 128 "
        f"`linear_warmup` keeps {100 * acc['linear_warmup'][128]:.1f} % where `linear` "
        f"diverges, but at 256 warmup falls to {100 * acc['linear_warmup'][256]:.1f} % too."
    )


# The convergence tree tried one or two LRs per batch: no batch is tuned, so no B_crit is fitted.
def knee_headline() -> str:
    """The beginning of the critical-batch headline of the convergence tree (the knee that
    follows is checked in test_report_steps_to_target)."""
    return (
        "No critical batch fitted (fewer than 3 tuned batches reached 85 %); steps to it (best "
        "LR per batch) "
    )


def with_knee_headline(found: list[str], expected: list[str]) -> bool:
    return len(found) == len(expected) and all(
        f.startswith(e) if e == knee_headline() else f == e
        for f, e in zip(found, expected, strict=True)
    )


def test_headline_says_what_to_act_on_in_five_sentences(mixed_tree, tmp_path):
    root, _ = mixed_tree
    written = build.build_report(root, tmp_path / "rep")
    assert with_knee_headline(
        written.headline,
        [
            expected_headline_start(),
            expected_warmup_headline(),
            expected_scaling_headline(),
            knee_headline(),
            "2 of 32 runs failed; they are listed under Failed runs.",
        ],
    )
    assert headline_of(tmp_path / "rep") == written.headline
    page = (tmp_path / "rep" / "index.html").read_text()
    top = page.split('<ul class="headline">', 1)[1].split("</ul>", 1)[0]
    assert top.count("<li>") == 5 and page.index("headline") < page.index("<h2>Findings")


def test_without_failures_or_scaling_runs_the_headline_tells_more_of_convergence(
    convergence_tree, tmp_path
):
    written = build.build_report(convergence_tree, tmp_path / "rep")
    assert with_knee_headline(
        written.headline,
        [
            expected_headline_start(),
            expected_warmup_headline(),
            knee_headline(),
            "At global batch 256, against the best of the LRs tried (70 steps to 85 %), the "
            "rules' efficiency is `linear_warmup` 100 %; `naive` and `linear` never reach it.",
        ],
    )


def test_findings_are_grouped_by_topic(mixed_tree, tmp_path):
    root, _ = mixed_tree
    out = build.build_report(root, tmp_path / "rep").out
    topics = topics_of(out)
    assert list(topics) == ["Runs", "Scaling", "All-reduce", "Convergence", "Steps to target"]
    assert set(expected_scaling_findings()) <= set(topics["Scaling"])
    assert topics["Convergence"] == expected_accuracy_findings()
    assert matches(
        topics["Steps to target"][: len(expected_target_findings())], expected_target_findings()
    )
    page = (out / "index.html").read_text()
    summaries = [p.split("</summary>", 1)[0] for p in page.split("<details><summary>")[1:]]
    assert summaries == [f"{t} ({len(found)})" for t, found in topics.items()]
