"""A report's runs' frames read from the bulk parse give what each run's own frame gives."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsuite import results
from dpsuite.analysis.report import data
from dpsuite.analysis.report.run_frames import RunFrames, run_column, stacked

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "bench"))
from readers_tree import write_tree  # noqa: E402


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> data.ResultsTree:
    root = tmp_path_factory.mktemp("tree")
    write_tree(root, 60)
    return data.load_tree(root)


def own_frames(frames: RunFrames) -> dict[str, pd.DataFrame]:
    return {run_id: frames[run_id].copy() for run_id in frames}


def fresh_epochs(tree: data.ResultsTree) -> RunFrames:
    """The tree's epochs read again, as the report reads them (none cut yet)."""
    ids = list(tree.runs["run_id"])
    dirs = [Path(d) for d in tree.runs["run_dir"]]
    return RunFrames(dict(zip(ids, results.epochs_of(dirs, {"run_id": ids}), strict=True)))


def test_a_run_column_is_its_frames_column(tree):
    assert isinstance(tree.epochs, RunFrames) and len(tree.epochs) == 60
    plain = own_frames(tree.epochs)
    for run_id in list(plain)[::7]:
        for name in ("epoch", "eval_acc", "grad_noise_scale", "no_such_column"):
            got, want = run_column(tree.epochs, run_id, name), run_column(plain, run_id, name)
            assert (got is None) == (want is None)
            if got is not None:
                np.testing.assert_array_equal(got, want)
    assert run_column(tree.epochs, "no-such-run", "epoch") is None


def test_every_runs_rows_are_their_frames_one_after_another(tree):
    plain = own_frames(tree.epochs)
    pd.testing.assert_frame_equal(tree.epochs.rows(), stacked(plain), check_exact=True)
    tree_steps = own_frames(tree.steps)
    pd.testing.assert_frame_equal(tree.steps.rows(), stacked(tree_steps), check_exact=True)


def test_a_frame_set_by_hand_is_the_one_read_and_in_the_rows(tree):
    frames = fresh_epochs(tree)
    run_id = next(iter(frames))
    frames[run_id] = frames[run_id].assign(eval_acc=np.nan)
    assert frames[run_id]["eval_acc"].isna().all()
    assert frames.rows().loc[lambda f: f["run_id"] == run_id, "eval_acc"].isna().all()


def test_divergence_points_read_in_one_pass_are_those_of_each_run(tree):
    runs = tree.runs.drop(columns=["last_finite_epoch", "last_finite_acc"])
    plain = own_frames(tree.epochs)
    run_id = next(iter(plain))  # one run whose last evaluations are not finite
    plain[run_id].loc[plain[run_id].index[-2:], "eval_loss"] = np.nan
    frames = fresh_epochs(tree)
    frames[run_id] = plain[run_id]
    together = data.add_divergence_points(runs, frames)
    one_by_one = data.add_divergence_points(runs, plain)
    pd.testing.assert_frame_equal(together, one_by_one, check_exact=True)
    row = together[together["run_id"] == run_id].iloc[0]
    assert row["last_finite_epoch"] == plain[run_id]["epoch"].iloc[-3]
