"""Each run's rows of one results CSV (its epochs.csv, its steps.csv) by run id, as a mapping
whose frames are cut from the bulk parse only when a run's own are asked for: a report reads
every run's rows at once (``rows``) or a few runs' alone, never thousands of small frames."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping

import numpy as np
import pandas as pd

from dpsuite.results.run_csvs import Read, joint_rows


class RunFrames(MutableMapping[str, pd.DataFrame]):
    """run id -> that run's frame, from the reads ``results.epochs_of`` (or ``steps_of``) gave."""

    def __init__(self, reads: dict[str, Read] | None = None) -> None:
        self._reads: dict[str, Read] = dict(reads or {})
        # Each joint frame's columns as arrays, taken once: thousands of runs read one column
        # of the same joint frame, and pandas builds a new Series at every lookup.
        self._arrays: dict[tuple[int, str], tuple[pd.DataFrame, np.ndarray]] = {}

    def __getitem__(self, run_id: str) -> pd.DataFrame:
        return self._reads[run_id].frame

    def __setitem__(self, run_id: str, frame: pd.DataFrame) -> None:
        self._reads[run_id] = Read(frame)

    def __delitem__(self, run_id: str) -> None:
        del self._reads[run_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reads)

    def __len__(self) -> int:
        return len(self._reads)

    def column(self, run_id: str, name: str) -> np.ndarray | None:
        """One run's values of column ``name`` (None: no such run or column), read from the
        joint frame without cutting the run's own."""
        read = self._reads.get(run_id)
        if read is None or read.part is None:
            return own_column(read.frame if read is not None else None, name)
        part = read.part
        if name not in part.joint:
            return None
        return self._joint_column(part.joint, name)[part.start : part.start + part.rows]

    def _joint_column(self, joint: pd.DataFrame, name: str) -> np.ndarray:
        key = (id(joint), name)
        held = self._arrays.get(key)
        if held is None or held[0] is not joint:  # the frame is held too: its id stays its own
            held = self._arrays[key] = (joint, joint[name].to_numpy())
        return held[1]

    def rows(self) -> pd.DataFrame:
        """Every run's rows one after another, each with its ``run_id``."""
        together = joint_rows(list(self._reads.values()))
        if together is not None and "run_id" in together:
            return together
        return stacked(self)


def stacked(frames: MutableMapping[str, pd.DataFrame] | dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The runs' frames with rows concatenated, each row with its run's ``run_id``."""
    parts = [frame.assign(run_id=run_id) for run_id, frame in frames.items() if len(frame)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["run_id"])


def own_column(frame: pd.DataFrame | None, name: str) -> np.ndarray | None:
    return frame[name].to_numpy() if frame is not None and name in frame else None


def run_column(frames: Mapping[str, pd.DataFrame], run_id: str, name: str) -> np.ndarray | None:
    """One run's values of column ``name`` in ``frames`` (a `RunFrames` or a plain mapping),
    None where the run or the column is not there."""
    if isinstance(frames, RunFrames):
        return frames.column(run_id, name)
    return own_column(frames.get(run_id), name)
