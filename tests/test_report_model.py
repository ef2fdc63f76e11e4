"""The Scaling model topic of `dpsuite report`: the model against the measured step times."""

from __future__ import annotations

import pandas as pd

from dpsuite import results
from dpsuite.analysis.report.sections import model
from tests import report_trees as trees
from tests.report_pages import (
    assert_valid_images,
    findings_of,
    report,
)


def test_scaling_model_section_when_runs_carry_parameter_counts(dpsuite, capsys, tmp_path):
    root = tmp_path / "res"
    trees.write_scaling(root)
    trees.write_comm_bench(root)
    for run_json in root.rglob("run.json"):
        rec = results.read_json(run_json)
        results.write_json_atomic(run_json, {**rec, "num_params": 78_858})
    out, _ = report(dpsuite, capsys, root, tmp_path / "rep")
    assert "scaling_model.png" in assert_valid_images(out)
    found = findings_of(out)
    assert any(f.startswith("At 2 workers the scaling model's step time is within") for f in found)
    assert "Scaling model validation" in (out / "index.md").read_text()


def test_model_findings_state_the_validated_range_and_name_the_worst_per_worker_count():
    # Validation rows of several fits, concatenated: the index repeats.
    validation = pd.DataFrame(
        {
            "series": ["mlp, b=32", "mlp, b=32", "cnn, b=32", "cnn, b=32"],
            "workers": [2, 4, 2, 4],
            "error_pct": [-14.0, -71.5, -51.5, -70.0],
            "oversubscribed": [False, True, False, True],
        },
        index=[0, 1, 0, 1],
    )
    assert model.model_findings(validation) == [
        "The scaling model is validated against measurements up to 2 workers (runs with more "
        "worker threads than cores left out); its predictions beyond are extrapolation.",
        "At 2 workers the scaling model's step time is within 52 % of the measured one "
        "(worst: cnn, b=32, -52 %).",
        "At 4 workers the scaling model's step time is within 72 % of the measured one "
        "(worst: mlp, b=32, -72 %); these runs had more worker threads than cores, which the "
        "model, fitted to one worker's compute, does not know about.",
    ]
