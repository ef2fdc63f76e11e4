"""The wait for data in the report: a part of the step-time breakdown, and input-bound
findings and headline, only for runs that measured it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsuite.analysis.report import data
from dpsuite.analysis.report.sections.scaling import (
    input_findings,
    scaling_limit,
    step_time_breakdown,
)
from tests import report_trees as trees


@pytest.fixture(scope="module")
def scaling(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("scaling")
    trees.write_scaling(root, cores=16)
    return data.scaling_table(data.load_tree(root).runs)


def labels(figure) -> list[str]:
    return [bar.get_label() for bar in figure.axes[0].containers]


def test_runs_without_a_measured_wait_draw_and_say_as_before(scaling):
    assert scaling["data_wait_s"].isna().all()
    assert "waiting for data" not in labels(step_time_breakdown(scaling))
    assert input_findings("w", scaling) == []
    assert "input-bound" not in (scaling_limit(scaling) or "")


def test_a_measured_wait_is_its_own_part_of_the_step(scaling):
    measured = scaling.copy()
    step = measured["step_time_s"]
    measured["data_wait_s"] = 0.38 * step
    measured["data_wait_share"] = 0.38
    measured["compute_time_s"] = 0.5 * step
    measured["exposed_comm_s"] = 0.12 * step
    figure = step_time_breakdown(measured)
    drawn = labels(figure)
    assert drawn.index("waiting for data") == drawn.index("exposed communication") - 1
    wait_bars = figure.axes[0].containers[drawn.index("waiting for data")]
    compute = 1e3 * measured["compute_time_s"].iloc[0]
    assert wait_bars[0].get_y() == pytest.approx(compute)  # stacked on compute
    assert wait_bars[0].get_height() == pytest.approx(1e3 * measured["data_wait_s"].iloc[0])
    n = int(measured["workers"].max())
    [sentence] = input_findings("w", measured)
    assert sentence.startswith(f"w: input-bound: 38 % of the step waits for data at {n} workers")
    assert f"input-bound: 38 % of the step waits for data at {n} workers" in scaling_limit(measured)


def test_below_the_threshold_a_run_is_not_input_bound(scaling):
    measured = scaling.copy()
    measured["data_wait_s"] = 0.0
    measured["data_wait_share"] = data.INPUT_BOUND_SHARE / 2
    [sentence] = input_findings("w", measured)
    assert "not input-bound: 5 %" in sentence and "(below 10 %)" in sentence
    assert "input-bound" not in scaling_limit(measured)
