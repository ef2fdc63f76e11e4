"""Steps-to-target studies of two workloads in one report: each its own tables and plots, and
one finding that says where their answers agree and where they do not."""

from __future__ import annotations

import pytest

from dpsuite.analysis.report import build, data, output, studies
from dpsuite.analysis.report.sections.steps_to_target import side_by_side
from tests import report_trees as trees
from tests.report_pages import findings_of

SECOND = "tiny_gpt_loss"


@pytest.fixture(scope="module")
def two_workloads(tmp_path_factory) -> tuple[output.Written, studies.Context]:
    root = tmp_path_factory.mktemp("two")
    trees.write_target_study(root / "mnist")
    trees.write_target_study(root / "gpt", workload=SECOND, steps=trees.SECOND_STUDY_STEPS)
    context = studies.context(data.load_tree(root))
    return build.build_report(root, tmp_path_factory.mktemp("two-rep")), context


def test_each_workload_has_its_own_study_and_plots(two_workloads):
    written, context = two_workloads
    assert sorted(str(s.group["workload"].iloc[0]) for s in context.targets) == [
        "mnist1d_mlp",
        SECOND,
    ]
    pngs = {p.name for p in written.out.glob("critical_batch*.png")}
    assert len(pngs) == 2, pngs  # one B_crit plot per workload
    page = (written.out / "index.md").read_text()
    assert page.count("LR oracle with and without warmup") == 2


def test_the_finding_says_where_the_two_agree_and_where_they_do_not(two_workloads):
    written, _ = two_workloads
    [line] = [f for f in findings_of(written.out) if "Workloads side by side" in f]
    # STUDY_STEPS: linear within 2x of the oracle to 128, linear_warmup to 256; the second
    # workload's linear_warmup misses from 256 on: both to 128.
    assert "they do not agree on whether warmup extends linear scaling" in line
    assert (
        "mnist1d_mlp: warmup extends it, `linear` within 2× of the oracle up to batch 128, "
        "`linear_warmup` up to 256" in line
    )
    assert f"{SECOND}: warmup does not extend it" in line
    assert "they agree on where the knee is" in line  # the same oracle in both
    page = (written.out / "index.md").read_text()
    assert "Workloads side by side: steps to target" in page


def test_one_workload_shows_no_comparison(two_workloads):
    _, context = two_workloads
    assert side_by_side.section(context.targets[:1]).findings == []
    assert side_by_side.section(context.targets).findings  # and two do


@pytest.mark.parametrize(
    ("knee", "b_simple", "said"),
    [
        (300.0, 100.0, "above B_simple"),
        (150.0, 100.0, "near B_simple"),
        (40.0, 100.0, "below B_simple"),
        (None, 100.0, "not placed"),
    ],
)
def test_the_knee_against_b_simple(knee, b_simple, said):
    assert side_by_side.knee_verdict(knee, b_simple) == said


def test_warmup_verdicts():
    assert side_by_side.warmup_verdict(128, 256) == "extends it"
    assert side_by_side.warmup_verdict(128, 128) == "does not extend it"
    assert side_by_side.warmup_verdict(256, 128) == "shortens it"
    assert side_by_side.warmup_verdict(None, 128) == side_by_side.NOT_RUN
