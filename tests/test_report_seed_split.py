"""Seeds that split: the convergence findings and headline quote the seeds' median, never a mean
no seed reached, and say how many seeds collapsed."""

from __future__ import annotations

import pandas as pd
import pytest

from dpsuite.analysis.report import data, seed_split
from dpsuite.analysis.report.sections import convergence

BASE = data.Baseline(batch=32, acc=0.93, std=0.001, runs=3)


def accuracy_rows(settings: dict[tuple[str, int], tuple[float, ...]]) -> pd.DataFrame:
    """An accuracy table (as `data.accuracy_table` gives) from each setting's final accuracies:
    three completed seeds, none diverged."""
    runs = [
        {
            "group": "g",
            "lr_rule": rule,
            "global_batch": batch,
            "status": "complete",
            "final_eval_acc": acc,
        }
        for (rule, batch), accs in settings.items()
        for acc in accs
    ]
    return data.accuracy_table(pd.DataFrame(runs))


# the reference study's seeds at the edge of stability (mnist1d_mlp, 5 epochs)
SPLIT = {
    ("linear", 64): (0.929, 0.928, 0.930),
    ("linear", 512): (0.117, 0.740, 0.736),
    ("linear", 1024): (0.098, 0.097, 0.099),
    ("linear_warmup", 64): (0.930, 0.929, 0.930),
    ("linear_warmup", 512): (0.895, 0.895, 0.907),
    ("linear_warmup", 1024): (0.429, 0.100, 0.100),
}


def test_split_seeds_are_quoted_by_their_median_and_the_collapse_is_named():
    acc = accuracy_rows(SPLIT)
    assert convergence.warmup_extension(acc, BASE) == (
        "Warmup extends linear scaling: at global batch 512 `linear_warmup` keeps 89.5 % where "
        "`linear` falls to 73.6 % (1 of 3 seeds collapsed to 11.7 %, 2 reached ≈73.8 %), but at "
        "1024 warmup falls to 10.0 % too (2 of 3 seeds collapsed to ≈10.0 %, 1 reached 42.9 %)."
    )
    found = convergence.convergence_findings(acc, BASE)
    assert (
        "`linear_warmup` stays within 1 point of the batch-32 accuracy up to global batch 64; "
        "falls to 10.0 % at batch 1024 (2 of 3 seeds collapsed to ≈10.0 %, 1 reached 42.9 %)."
        in found
    )


def test_seeds_that_do_not_split_are_quoted_by_their_median_alone():
    acc = accuracy_rows(
        {
            ("linear", 64): (0.929, 0.928, 0.930),
            ("linear", 512): (0.50, 0.60, 0.70),  # spread evenly: no gap over 15 points
            ("linear_warmup", 64): (0.930, 0.929, 0.930),
            ("linear_warmup", 512): (0.80, 0.85, 0.84),
        }
    )
    assert convergence.warmup_extension(acc, BASE) == (
        "Warmup extends linear scaling: at global batch 512 `linear_warmup` keeps 84.0 % where "
        "`linear` falls to 60.0 %."
    )
    found = convergence.convergence_findings(acc, BASE)
    assert (
        "`linear` stays within 1 point of the batch-32 accuracy up to global batch 64; falls to "
        "60.0 % at batch 512." in found
    )
    assert not any("collapsed" in sentence for sentence in found)


def test_one_collapsed_seed_of_three_does_not_break_a_batch_that_holds():
    # the mean (65.3 %) would say batch 128 falls; two of three seeds hold the baseline
    acc = accuracy_rows({("linear", 64): (0.93, 0.93, 0.93), ("linear", 128): (0.10, 0.93, 0.93)})
    assert convergence.largest_holding(convergence.scaled_rows(acc, "linear", BASE), BASE) == 128


@pytest.mark.parametrize(
    "accs,camps,median",
    [
        ((0.117, 0.740, 0.736), ((0.117,), (0.736, 0.740)), 0.736),
        ((0.429, 0.100, 0.100), ((0.100, 0.100), (0.429,)), 0.100),
        ((0.50, 0.60, 0.70), None, 0.60),  # widest gap 10 points: no split
        ((0.10, 0.80), ((0.10,), (0.80,)), 0.10),  # two camps of one: not the 45 % between
        ((0.90,), None, 0.90),
    ],
)
def test_split_rule(accs, camps, median):
    parts = seed_split.split(accs)
    assert (parts and (parts.collapsed, parts.reached)) == camps
    assert seed_split.median(accs) == pytest.approx(median)
