"""The Synchronization strategies topic of `dpsuite report`: throughput, bytes and accuracy per
strategy, and the accuracy-communication frontier."""

from __future__ import annotations

import pandas as pd

from dpsuite.analysis.report import data
from tests import report_trees as trees
from tests.report_pages import (
    SCALING_PLOTS,
    SYNC_PLOTS,
    assert_valid_images,
    findings_of,
    html_images,
    report,
)


def expected_sync_findings() -> list[str]:
    """Hand-computed from trees.SYNC at 4 workers (all-reduce: 308 KiB, 3,000 samples/s, 89 %)."""
    return [
        "At 4 workers, `param_server` sends 616 KiB per step per worker, 2.0× "
        "more than all-reduce's 308 KiB; 1,600 samples/s (0.53× all-reduce); final accuracy "
        "89.0 % (+0.0 points).",
        "At 4 workers, `local_sgd (period 4)` sends 77 KiB per step per worker, "
        "4.0× less than all-reduce's 308 KiB; 3,600 samples/s (1.20× all-reduce); final accuracy "
        "87.0 % (-2.0 points).",
        "At 4 workers, `fp16` sends 154 KiB per step per worker, 2.0× less than "
        "all-reduce's 308 KiB; 3,200 samples/s (1.07× all-reduce); final accuracy 89.0 % "
        "(+0.0 points).",
        "At 4 workers, `powersgd (rank 1, from step 10)` sends 6.23 KiB per step per worker, "
        "49.4× less than all-reduce's 308 KiB; 2,900 samples/s (0.97× "
        "all-reduce); final accuracy 85.0 % (-4.0 points).",
        "At 4 workers, the fastest strategy is `local_sgd (period 4)`: 3,600 samples/s, 1.20× "
        "all-reduce.",
        "`param_server`: the server sends 616 KiB per step at 2 workers and 1.8 MiB at 4 "
        "(3.0×), while a worker sends 616 KiB at 2 and 616 KiB at 4.",
        "At 4 workers, the accuracy–communication frontier (each strategy on it is more than 1 "
        "point more accurate than every cheaper one) is `powersgd (rank 1, from step 10)` "
        "(6.23 KiB, 85.0 %), `local_sgd (period 4)` (77 KiB, 87.0 %), `fp16` (154 KiB, 89.0 %); "
        "dominated: `allreduce`, `param_server`.",
    ]


def test_sync_strategies(dpsuite, capsys, tmp_path):
    trees.write_sync(tmp_path / "res")
    out, err = report(dpsuite, capsys, tmp_path / "res", tmp_path / "rep")
    assert err == ""
    assert assert_valid_images(out) == SCALING_PLOTS | SYNC_PLOTS
    found = findings_of(out)
    sync_found = [f for f in found if f in expected_sync_findings()]
    assert sync_found == expected_sync_findings()
    md = (out / "index.md").read_text()
    table = md.split("\n## Synchronization strategies\n\n", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == 15  # five strategies x three worker counts
    # Throughput series are split by strategy, never pooled across strategies.
    scaling = data.scaling_table(data.load_tree(tmp_path / "res").runs)
    assert scaling["series"].nunique() == 5
    assert scaling.groupby("series")["workers"].apply(list).map(len).eq(3).all()


def test_no_sync_section_without_strategy_runs(dpsuite, capsys, scaling_tree, tmp_path):
    tree = data.load_tree(scaling_tree)
    assert set(tree.runs["sync"]) == {"allreduce"}  # records without the key read as all-reduce
    out, _ = report(dpsuite, capsys, scaling_tree, tmp_path / "rep")
    assert not SYNC_PLOTS & set(html_images(out))
    assert "## Synchronization strategies" not in (out / "index.md").read_text()


def test_frontier_keeps_only_points_worth_their_bytes():
    from dpsuite.analysis.report.sections.sync import frontier

    points = pd.DataFrame(
        {
            "sync_label": ["a", "b", "c", "d", "e", "f"],
            "wire_bytes_per_step": [10.0, 20.0, 20.0, 40.0, 5.0, 80.0],
            "final_eval_acc": [0.80, 0.85, 0.83, 0.85, 0.70, 0.855],
        }
    )
    assert list(frontier(points, tolerance=0.0)["sync_label"]) == ["e", "a", "b", "f"]
    # Half a point more for twice the bytes is within one seed's noise: not worth it.
    assert list(frontier(points, tolerance=0.01)["sync_label"]) == ["e", "a", "b"]
