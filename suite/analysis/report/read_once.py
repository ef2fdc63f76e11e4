"""Each run and comm-bench result counted once when the trees given overlap.

``dpsuite compare TREE TREE/boxb`` reads boxb's runs twice. A run is its directory, wherever it
is reached from (a symlink, a parent tree): the run id alone would not do, since it is the
config's hash, the same for one configuration on two machines. The first tree on the command
line keeps a result read twice; the others say, in one warning line each, how many they left.
"""

from __future__ import annotations

import os

import pandas as pd

from dpsuite.analysis.report.data import ResultsTree
from dpsuite.analysis.report.meta import display_path
from dpsuite.analysis.report.text import plural


def _real(paths: pd.Series) -> pd.Series:
    return paths.astype(str).map(os.path.realpath)


def _unseen(frame: pd.DataFrame, column: str, seen: set[str]) -> pd.Series:
    """Which rows of ``frame`` come from a directory (in ``column``) not in ``seen``; adds
    this frame's directories to ``seen``."""
    if frame.empty or column not in frame:
        return pd.Series(True, index=frame.index)
    real = _real(frame[column])
    fresh = ~real.isin(seen)
    seen.update(real)
    return fresh


def count_once(trees: list[ResultsTree]) -> None:
    """Drop (in place) every run and comm-bench result an earlier tree already read, with one
    warning line on the tree that read it again."""
    runs_seen: set[str] = set()
    benches_seen: set[str] = set()
    for tree in trees:
        runs_kept = _unseen(tree.runs, "run_dir", runs_seen)
        comm_kept = _unseen(tree.comm, "bench_dir", benches_seen)
        again = int((~runs_kept).sum())
        benches_again = tree.comm.loc[~comm_kept, "bench_dir"].nunique() if len(tree.comm) else 0
        if not again and not benches_again:
            continue
        tree.runs = tree.runs[runs_kept].reset_index(drop=True)
        tree.comm = tree.comm[comm_kept].reset_index(drop=True)
        counts = [plural(again, "run"), plural(int(benches_again), "comm-bench result")]
        what = " and ".join(c for c, n in zip(counts, (again, benches_again), strict=True) if n)
        tree.warnings.append(
            f"{display_path(tree.source)}: {what} already read from an earlier directory, "
            "counted once"
        )
