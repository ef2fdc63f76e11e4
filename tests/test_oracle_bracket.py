"""The LR oracle's table names the LRs that bracket each batch's best on the LR axis."""

import math

import pandas as pd

from dpsuite.analysis.report.sections.steps_to_target.oracle import lr_neighbours


def settings(rows):
    return pd.DataFrame(rows, columns=["global_batch", "peak_lr", "steps"])


def test_the_nearest_lr_on_each_side_with_its_fewest_steps():
    frame = settings(
        [
            (64, 0.05, 900.0),
            (64, 0.071, 700.0),
            (64, 0.1, 500.0),
            (64, 0.141, 650.0),
            (64, 0.141, 600.0),  # the same LR with warmup: the fewer steps count
            (64, 0.2, math.inf),
            (128, 0.071, 10.0),  # another batch is not looked at
        ]
    )
    assert lr_neighbours(frame, 64, 0.1) == ("0.071: 700", "0.141: 600")


def test_an_lr_within_one_percent_is_the_best_itself():
    frame = settings([(256, 0.2, 367.0), (256, 0.28284, 326.0), (256, 0.283, 313.0)])
    frame.loc[len(frame)] = (256, 0.4, math.inf)
    assert lr_neighbours(frame, 256, 0.283) == ("0.2: 367", "0.4: never")


def test_a_best_at_the_grid_edge_has_none_tried_beyond_it():
    frame = settings([(32, 0.05, 100.0), (32, 0.1, 120.0)])
    assert lr_neighbours(frame, 32, 0.05) == ("none tried", "0.1: 120")
    assert lr_neighbours(frame, 32, math.nan) == ("", "")
