"""The Runs topic of `dpsuite report`: diverged, failed and still-running runs, and damaged
files named in a warning while the report goes on without them."""

from __future__ import annotations

import pandas as pd

from tests.report_expected import (
    NEAR_PREFIX,
    expected_convergence_findings,
    expected_scaling_findings,
)
from tests.report_pages import (
    COMM_PLOT,
    CONVERGENCE_PLOTS,
    NOISE_SCALE_PLOTS,
    SCALING_PLOTS,
    TARGET_PLOTS,
    TIME_PLOT,
    assert_valid_images,
    findings_of,
    report,
)


def test_mixed_with_failures_and_corrupt_files(dpsuite, capsys, mixed_tree, tmp_path):
    root, damaged = mixed_tree
    out, err = report(dpsuite, capsys, root, tmp_path / "rep")
    assert assert_valid_images(out) == (
        SCALING_PLOTS | CONVERGENCE_PLOTS | TARGET_PLOTS | NOISE_SCALE_PLOTS | COMM_PLOT | TIME_PLOT
    )
    found = findings_of(out)
    assert found[:2] == [
        "4 of 32 runs diverged (non-finite loss); they are drawn with an × at their last "
        "finite evaluation.",
        "2 of 32 runs failed; they are listed under Failed runs.",
    ]
    for sentence in expected_scaling_findings() + expected_convergence_findings():
        assert sentence in found or (
            sentence == NEAR_PREFIX and any(f.startswith(sentence) for f in found)
        )
    # Each damaged file is named once in a warning; the report goes on without it.
    warnings = [line for line in err.splitlines() if line.startswith("dpsuite: warning: ")]
    for key in ("truncated", "epochs", "steps"):
        assert sum(str(damaged[key]) in w for w in warnings) == 1, (key, warnings)
    html = (out / "index.html").read_text()
    assert "<h2>Warnings</h2>" in html and str(damaged["truncated"]) in html
    failed_section = html.split("<h2>Failed runs</h2>", 1)[1].split("<h2>", 1)[0]
    assert damaged["failed"].name in failed_section and "worker 3 exited" in failed_section
    assert damaged["stale"].name in failed_section  # 'running' from a dead process
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 32 and summary["run_id"].is_unique
    # a record lacking the keys its run id is made of is left out, named in a warning
    assert "minimal" not in set(summary["run_id"])
    assert any("minimal/run.json: schema_version is missing" in w for w in warnings)
