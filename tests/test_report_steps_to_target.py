"""The Steps to target topic of `dpsuite report`: censored steps per LR setting, the LR oracle,
the critical batch beside the gradient noise scale, the knee and time to target."""

from __future__ import annotations

import math
import statistics
import warnings
from pathlib import Path

import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.report import build, critical_batch_fit, data, output
from dpsuite.analysis.report.text import approx
from tests import report_trees as trees
from tests.report_expected import (
    NO_FIT,
    NO_VALIDATION,
    capital,
    expected_convergence_findings,
    expected_prediction,
    expected_scaling_headline,
)
from tests.report_pages import (
    CONVERGENCE_PLOTS,
    TARGET_PLOTS,
    assert_valid_images,
    findings_of,
    topics_of,
)


def test_runs_that_missed_the_target_are_kept_out_of_the_noise_scale(tmp_path):
    """A linear_warmup run at batch 512 that ended at chance (10 %) has a noise scale of its
    own, that of a model that did not learn: it must not bend the curves or the prediction."""
    root = tmp_path / "res"
    trees.write_convergence(root)
    trees.write_run(
        root,
        workers=512 // trees.PER_WORKER,
        mode="simulated",
        lr_rule="linear_warmup",
        final_acc=0.1,
        noise_scale=True,
        steps_per_epoch=trees.CONVERGENCE_SAMPLES // 512,
    )
    written = build.build_report(root, tmp_path / "rep")
    tree = data.load_tree(root)
    trained = critical_batch_fit.trained_runs(data.convergence_runs(tree.runs), tree.epochs)
    assert 512 not in set(trained.runs["global_batch"])
    assert 512 not in set(
        critical_batch_fit.noise_scale_curves(trained.runs, tree.epochs, "linear_warmup")[
            "global_batch"
        ]
    )
    found = findings_of(written.out)
    assert any(capital(expected_prediction()) in f for f in found)  # the same as without it
    assert "9 runs that did not reach the target are left out of the noise-scale prediction." in (
        found
    )


def strip_noise_scale(root: Path) -> None:
    """Make a tree look written before the noise scale was measured: no columns, no metric."""
    for epochs_csv in root.rglob("epochs.csv"):
        frame = pd.read_csv(epochs_csv).drop(columns=results.OPTIONAL_EPOCH_COLUMNS)
        frame.to_csv(epochs_csv, index=False)
    for run_json in root.rglob("run.json"):
        rec = results.read_json(run_json)
        rec["metrics"].pop("grad_noise_scale")
        results.write_json_atomic(run_json, rec)


@pytest.mark.parametrize("old_files", [False, True], ids=["empty-columns", "older-files"])
def test_convergence_without_noise_scale(tmp_path, old_files):
    root = tmp_path / "res"
    trees.write_convergence(root, noise_scale=False)
    if old_files:
        strip_noise_scale(root)
        assert "grad_noise_scale" not in pd.read_csv(next(root.rglob("epochs.csv")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of any kind from reading or plotting
        written = build.build_report(root, tmp_path / "rep")
    assert written.warnings == [  # only that the oracle's batches are not known to be tuned
        f"steps to target (mnist1d_mlp): global batch {b} is not known to be tuned: "
        f"only {n} LR{'s' if n > 1 else ''} tried"
        for b, n in ((32, 1), (64, 2), (128, 2), (256, 2))
    ]
    out = tmp_path / "rep"
    # no batch is tuned: no critical batch fitted, and no noise scale: no critical-batch plot
    assert assert_valid_images(out) == CONVERGENCE_PLOTS | TARGET_PLOTS
    assert findings_of(out)[1:] == expected_convergence_findings(noise_scale=False)
    summary = pd.read_csv(out / "summary.csv")
    assert summary["grad_noise_scale.mean"].isna().all()


@pytest.fixture(scope="module")
def study_report(tmp_path_factory) -> output.Written:
    root = tmp_path_factory.mktemp("study")
    trees.write_target_study(root / "study")
    trees.write_scaling(root / "scaling")
    return build.build_report(root, tmp_path_factory.mktemp("study-rep"))


def study_knee() -> float:
    """The oracle (fewest seed-median steps per batch, trees.STUDY_STEPS) is 80 steps at 256 and
    90 at 512 against perfect scaling of 50 and 25 from 400 at 32: 1.6x, then 3.6x."""
    r256, r512 = 80 / 50, 90 / 25
    return 256 * 2 ** ((math.log(2) - math.log(r256)) / (math.log(r512) - math.log(r256)))


def study_prediction() -> float:
    """Median over the runs that reached the target of their pooled B_simple (by seed)."""
    return statistics.median(
        trees.STUDY_POOLED[seed]
        for by_batch in trees.STUDY_STEPS.values()
        for per_seed in by_batch.values()
        for seed, steps in zip(trees.STUDY_SEEDS, per_seed, strict=True)
        if steps is not None
    )


def test_study_counts_missed_seeds_finds_the_oracle_knee_and_the_fastest_way(study_report):
    out = study_report.out
    assert {
        "steps_to_target.png",
        "rule_efficiency.png",
        "critical_batch.png",
        "time_to_target.png",
    } <= assert_valid_images(out)
    knee, predicted = study_knee(), study_prediction()
    assert round(knee) == 310 and predicted == 150
    found = topics_of(out)["Steps to target"]
    assert found[:5] == [
        NO_VALIDATION,
        # linear 0.1 x 2; linear_warmup 0.1 x 4; sqrt 0.1 x sqrt(8); power 0.75: 0.1 x 16^0.75
        "LR oracle (at each global batch the fewest seed-median steps over the 1–5 distinct "
        "peak LRs tried there): 80 % test accuracy in 400 steps at 32 (LR 0.1), 205 steps at 64 "
        "(LR 0.2), 110 steps at 128 (LR 0.4), 80 steps at 256 (LR 0.283), 90 steps at 512 "
        "(LR 0.8).",
        "At global batch 32 only 1 peak LR (0.1) was tried, fewer than 3: the oracle there is "
        "not tuned, and every ratio to it is suspect.",
        "At global batch 64 the fewest steps come from the largest LR tried (peak LR 0.2, "
        "`linear`, of 0.1, 0.119, 0.141, 0.168, 0.2): the best-tuned steps there may be fewer "
        "still.",
        "At global batch 128 the fewest steps come from the largest LR tried (peak LR 0.4, "
        "`linear_warmup`, of 0.1, 0.141, 0.2, 0.283, 0.4): the best-tuned steps there may be "
        "fewer still.",
    ]
    assert (
        # 2 + 3 of naive, 1 + 3 + 3 of linear, 2 of linear_warmup, 2 of power 0.25; linear at
        # 128 still reaches it in two of three seeds
        "16 of 75 runs did not reach 80 % within the 16-epoch budget (or diverged first); each "
        "counts as never reaching it, so a seed median is never where half the seeds or more "
        "missed: `naive` and `linear` at 256; `naive`, `linear` and `linear_warmup` at 512; 1 of "
        "the 8 (LR, batch) points of the `power` grid." in found
    )
    assert (
        "`sqrt` against the LR oracle (oracle steps / its steps to 80 %): 79 % at 64, 69 % at "
        "128, 100 % at 256, 95 % at 512." in found
    )  # 205/260, 110/160, 80/80, 90/95
    assert (
        "`linear` against the LR oracle (oracle steps / its steps to 80 %): 100 % at 64, 73 % at "
        "128, never from 256 on." in found
    )  # at 128 its median is 150: the seed that missed counts
    # 32 (one LR), 64 and 128 (the best at the grid's edge) are not tuned: 256 and 512 are
    # too few to fit
    assert NO_FIT in found
    # Near the target, per oracle run: the windows (one per epoch, B_simple = gns_at, |G|^2 =
    # 1/epoch) in the last quarter of its steps. 32: step 400 = epoch 2 -> 100; 64 (100 steps
    # an epoch, 200-210 steps): epoch 2 -> 100 x 2^0.1; 128 (50 an epoch, 108-115): epoch 2 ->
    # 100 x 4^0.1; 256 (25 an epoch, 78-82): epoch 3 -> 200 x 8^0.1; 512 (12 an epoch, 88-92):
    # epochs 6 and 7 -> 200 x 16^0.1. Three seeds each: the median is 100 x 4^0.1.
    near = 100 * 4**0.1
    near_found = next(f for f in found if f.startswith("B_simple near the target"))
    assert f"median over 15 runs): ≈ {approx(near)} (" in near_found
    assert "Predicted / fitted" not in near_found
    critical = next(f for f in found if f.startswith("The LR oracle's steps to target leave"))
    assert critical == (
        "The LR oracle's steps to target leave 2× perfect scaling at global batch ≈ 310 "
        "(interpolated in log-log between 256 and 512); for that definition the noise scale "
        f"near the target predicts B_noise + 2·B0 = {approx(near + 64)} (B0 = 32): predicted / "
        f"found = {(near + 64) / knee:.2g}."
    )
    assert (
        "The gradient noise scale of the 59 runs that reached 80 % (B_simple pooled over each "
        f"run's measured steps, median over runs) predicts a critical batch ≈ {predicted:g}"
        in " ".join(found)
    )
    assert "16 runs that did not reach the target are left out of the noise-scale prediction." in (
        found
    )
    assert (
        "Time to 80 % (training steps only) at the best LR per batch: fastest measured on this "
        "machine with 8 workers × 32 (3.9 s: 80 steps of 49 ms)." in found
    )  # 80 steps at 256 (sqrt) x 256 / 5200 samples/s
    assert study_report.headline[0] == expected_scaling_headline()
    # the demo's case: no B_crit from batches not known to be tuned, and the headline says so
    assert study_report.headline[1] == (
        "No critical batch fitted (fewer than 3 tuned batches reached 80 %); steps to it (best LR "
        f"per batch) leave 2× perfect scaling at global batch ≈ {approx(knee)}."
    )
    assert study_report.headline[2] == (
        "On this machine 80 % is reached fastest with 8 workers × 32 (3.9 s of training steps "
        "at the best LR)."
    )
    md = (out / "index.md").read_text()
    assert "| 512 | 90 | 25 | " in md and "| power 0.75 |" in md  # the grid's LR is named
    assert "the gradients of the two halves of each global batch" in md
