"""The Convergence topic of `dpsuite report` (a fixed budget): final accuracy against global
batch per LR rule, the small-batch baseline, training curves."""

from __future__ import annotations

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.report import data
from dpsuite.analysis.report.sections import convergence
from tests import report_trees as trees
from tests.report_expected import (
    expected_convergence_findings,
    matches,
)
from tests.report_pages import (
    CONVERGENCE_PLOTS,
    NOISE_SCALE_PLOTS,
    TARGET_PLOTS,
    assert_valid_images,
    findings_of,
    report,
)


def test_convergence_only(dpsuite, capsys, convergence_tree, tmp_path):
    out, _ = report(dpsuite, capsys, convergence_tree, tmp_path / "rep")
    assert assert_valid_images(out) == CONVERGENCE_PLOTS | TARGET_PLOTS | NOISE_SCALE_PLOTS
    assert matches(findings_of(out)[1:], expected_convergence_findings())
    assert findings_of(out)[0].startswith("4 of 24 runs diverged")
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 24 and set(summary["status"]) == {"complete", "diverged"}
    diverged = summary[summary["status"] == "diverged"]
    assert diverged["last_finite_epoch"].eq(1).all()  # the × sits at the last finite eval
    done = summary[summary["status"] == "complete"]
    last = max(trees.GNS_BY_EPOCH)
    expected_final = [trees.gns_at(last, b) for b in done["global_batch"]]
    assert done["grad_noise_scale.final"].tolist() == pytest.approx(expected_final)
    assert done["grad_noise_scale.mean"].notna().all() and "grad_noise_scale" not in summary


def test_plain_scaling_sweep_is_not_a_convergence_study(scaling_tree):
    tree = data.load_tree(scaling_tree)
    assert tree.runs["global_batch"].nunique() == 4
    assert data.convergence_runs(tree.runs).empty


@pytest.mark.parametrize(
    "batches,expected",
    [([32], [32]), ([32, 64, 128], [32, 64, 128]), ([32, 64, 128, 256, 512], [32, 128, 512])],
)
def test_curve_batches(batches, expected):
    assert data.curve_batches(pd.DataFrame({"global_batch": batches})) == expected


def test_lars_with_its_own_base_lr_and_schedule_joins_the_other_rules(tmp_path):
    root = tmp_path / "res"
    trees.write_convergence(root)
    for batch, acc in ((32, 0.70), (64, 0.69), (128, 0.68), (256, 0.66)):
        run = trees.write_run(
            root, workers=batch // trees.PER_WORKER, mode="simulated", lr_rule="lars", final_acc=acc
        )
        rec = results.read_json(run / "run.json")
        results.write_json_atomic(run / "run.json", {**rec, "base_lr": 3.0, "schedule": "poly"})
    conv = data.convergence_runs(data.load_tree(root).runs)
    assert conv["group"].nunique() == 1 and set(conv["lr_rule"]) >= {"lars", "naive"}
    base = data.baseline(conv)
    # the recipe's own runs at batch 32, not lars: every rule trains the same two seeds there
    assert (base.runs, base.shared) == (len(trees.SEEDS), len(trees.SEEDS) * 2)
    found = convergence.convergence_findings(data.accuracy_table(conv), base)
    assert (
        "`lars` falls more than 1 point below the batch-32 accuracy already at global batch 32; "
        "falls to 66.0 % at batch 256." in found
    )
