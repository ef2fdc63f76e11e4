"""Many runs' CSVs of one kind (every epochs.csv, every steps.csv) read in one parse.

``read_csv_checked`` reads one file; ``read_many`` gives, for a list of files, exactly the frame
and warnings ``read_csv_checked`` gives for each, but parses the files that share a header as
one text (one call into pandas' C parser instead of one per file: over thousands of runs the
per-call cost is what dominates). A file the bulk parse cannot stand in for exactly (unreadable,
quoted, blank lines, damaged rows, a column whose type could differ when read alone) is read
alone, so frames and warnings never depend on which path read them.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpsuite.results.gate import is_regular

# A token with any of these is no integer: a column holding one is float when read alone.
NOT_INTEGER = frozenset(".eEnNiI")
UTF8_BOM = "\ufeff".encode()


def read_csv_checked(file: Path, columns: list[str], optional: list[str] = ()) -> pd.DataFrame:
    """A results CSV with numeric columns. Missing: empty. Unreadable: empty, with a warning
    naming the file. Damaged rows (no step): dropped, with a warning. ``optional`` columns
    absent from the file (written by an older version) read as empty."""
    if not file.exists():
        return pd.DataFrame(columns=columns)
    try:
        if not is_regular(file):
            raise ValueError("not a regular file")
        frame = pd.read_csv(file)
        for column in optional:
            if column not in frame.columns:
                frame[column] = float("nan")
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"missing columns {missing}")
    except (OSError, ValueError, pd.errors.ParserError) as exc:  # EmptyData/Unicode: ValueErrors
        warnings.warn(f"skipping unreadable {file}: {str(exc).splitlines()[0]}", stacklevel=2)
        return pd.DataFrame(columns=columns)
    frame = frame[columns].apply(pd.to_numeric, errors="coerce")
    damaged = frame["step"].isna()
    if damaged.any():
        warnings.warn(f"ignoring {int(damaged.sum())} damaged rows in {file}", stacklevel=2)
        frame = frame[~damaged]
    return frame.reset_index(drop=True)


@dataclass(frozen=True)
class Part:
    """Rows ``start`` to ``start + rows`` of the frame several files were parsed into."""

    joint: pd.DataFrame
    start: int
    rows: int


class Read:
    """One file's frame and the warnings reading it gave (as ``read_csv_checked`` words them).

    A file parsed with others keeps its ``part`` of their joint frame and is cut from it only
    when its ``frame`` is first asked for: over thousands of runs most frames never are (a
    reader wants every run's rows at once, see ``joint_rows``, or a few runs' alone)."""

    def __init__(
        self, frame: pd.DataFrame | None = None, notes: list[str] | None = None, part=None
    ) -> None:
        self._frame = frame
        self.notes: list[str] = notes if notes is not None else []
        self.part: Part | None = part

    @property
    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            self._frame = split_off(self.part.joint, self.part.start, self.part.rows)
        return self._frame

    @frame.setter
    def frame(self, frame: pd.DataFrame) -> None:
        self._frame, self.part = frame, None

    @property
    def rows(self) -> int:
        """How many rows the frame has (without cutting it)."""
        return self.part.rows if self.part is not None else len(self.frame)

    @property
    def empty(self) -> bool:
        return self.rows == 0


def read_alone(file: Path, columns: list[str], optional: list[str]) -> Read:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = read_csv_checked(file, columns, optional)
    return Read(frame, [str(w.message) for w in caught if w.category is UserWarning])


def plain_csv(file: Path) -> bytes | None:
    """The file's bytes when the bulk parse reads it as pandas reads it alone, else None: a
    regular UTF-8 file with a header and rows, no quotes, lone carriage returns or blank lines.
    Bytes, not text: the bulk parse joins thousands of files (tens of megabytes) and pandas
    parses bytes, so text would be decoded, joined and encoded again for nothing."""
    try:
        if not is_regular(file):
            return None
        data = file.read_bytes()
        if not data.isascii():
            data.decode("utf-8")  # only to know it is UTF-8: the newlines and quotes are ASCII
    except (OSError, UnicodeDecodeError):
        return None
    if b"\r" in data:  # \r\n: how the csv module ends lines; pandas reads both alike
        data = data.replace(b"\r\n", b"\n")
    if not data.endswith(b"\n"):
        data += b"\n"
    header_end = data.find(b"\n")
    if header_end <= 0 or header_end == len(data) - 1 or data.startswith(UTF8_BOM):
        return None
    if b'"' in data or b"\r" in data or b"\n\n" in data:
        return None
    return data


def read_many(
    files: Sequence[Path],
    columns: list[str],
    optional: Sequence[str] = (),
    labels: Mapping[str, Sequence[str]] | None = None,
) -> list[Read]:
    """``read_csv_checked`` of each file, in order, parsing files that share a header at once.
    ``labels`` (column name: one value per file, e.g. the run ids) become columns after
    ``columns``, each file's value on each of its rows."""
    optional = list(optional)
    labels = dict(labels or {})
    reads: list[Read | None] = [None] * len(files)
    by_header: dict[str, list[tuple[int, bytes]]] = {}
    for i, file in enumerate(files):
        data = plain_csv(file)
        if data is None:
            continue
        header, body = data.split(b"\n", 1)
        by_header.setdefault(header.decode(), []).append((i, body))
    for header, members in by_header.items():
        bodies = [body for _, body in members]
        own = {name: [values[i] for i, _ in members] for name, values in labels.items()}
        for i, part in parse_together(header, bodies, columns, optional, own):
            if part is not None:
                reads[members[i][0]] = Read(part=part)
    return [
        read if read is not None else labelled(read_alone(file, columns, optional), labels, i)
        for i, (file, read) in enumerate(zip(files, reads, strict=True))
    ]


def labelled(read: Read, labels: Mapping[str, Sequence[str]], i: int) -> Read:
    """The read with the ``i``-th file's value of each label as a column."""
    if labels:
        read.frame = read.frame.assign(**{name: values[i] for name, values in labels.items()})
    return read


def parse_together(
    header: str,
    bodies: list[bytes],
    columns: list[str],
    optional: list[str],
    labels: Mapping[str, list[str]] | None = None,
) -> list[tuple[int, Part | None]]:
    """Each body's part of the joint frame (None: read it alone), parsed as one CSV under
    ``header``, with each body's value of each label as a column (set once for all: a column
    set on each frame costs more than its parse)."""
    alone = [(i, None) for i in range(len(bodies))]
    try:
        # one bytes object, as the files hold it (a StringIO of text holds 4 bytes a character)
        text = b"".join([header.encode(), b"\n", *bodies])
        raw = pd.read_csv(io.BytesIO(text), low_memory=False)
    except (ValueError, pd.errors.ParserError):
        return alone
    rows = np.array([body.count(b"\n") for body in bodies])
    if list(raw.columns) != header.split(","):  # renamed duplicates, stripped names: alone
        return alone
    numeric = all(dtype.kind in "if" for dtype in raw.dtypes)
    named = all(c in raw.columns or c in optional for c in columns)
    one_row_each = isinstance(raw.index, pd.RangeIndex) and len(raw) == rows.sum()
    if not (numeric and named and one_row_each):
        return alone
    for column in optional:
        if column not in raw.columns:
            raw[column] = float("nan")
    frame = raw[columns]
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    exact = exactly_typed(frame, header, bodies, starts, rows)
    if labels:
        frame = frame.copy(deep=False)
        for name, values in labels.items():
            frame[name] = repeated(values, rows)
    return [
        (i, Part(frame, int(start), int(n)) if exact[i] else None)
        for i, (start, n) in enumerate(zip(starts, rows, strict=True))
    ]


def repeated(values: Sequence, counts: Sequence[int] | np.ndarray) -> Any:
    """Each value ``counts`` times over, as a column: what ``np.repeat`` of the values as
    objects makes once set, but text is taken as text at once (turning a million repeated
    Python strings into a column of text costs a second; its distinct values, nothing)."""
    if len(values) and all(isinstance(value, str) for value in values):
        return pd.array(list(values), dtype="str").take(np.repeat(np.arange(len(values)), counts))
    return np.repeat(np.array(values, dtype=object), counts)


def exactly_typed(
    frame: pd.DataFrame, header: str, bodies: list[bytes], starts: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Which bodies' rows have, in the joint frame, the types they have read alone: no damaged
    row (no step), and every float column either not all integers in that body or holding a
    token that is no integer (in its first row; else the body is read alone)."""
    exact = np.logical_and.reduceat(frame["step"].notna().to_numpy(), starts)
    fields = header.split(",")
    for column in frame.columns:
        values = frame[column].to_numpy()
        if values.dtype.kind != "f" or column not in fields:  # an optional one, absent: NaN
            continue
        whole = ~np.isnan(values) & (values == np.floor(values))
        suspect = np.logical_and.reduceat(whole, starts) & exact
        position = fields.index(column)
        for i in np.flatnonzero(suspect):
            first = bodies[i].split(b"\n", 1)[0].decode().split(",")
            token = first[position] if position < len(first) else ""
            exact[i] = not NOT_INTEGER.isdisjoint(token)
    return exact & (rows > 0)


def split_off(frame: pd.DataFrame, start: int, rows: int) -> pd.DataFrame:
    """Rows ``start`` to ``start + rows`` as a frame of their own, indexed from 0."""
    part = frame.iloc[start : start + rows]  # copy-on-write: a change to it copies it first
    part.index = pd.RangeIndex(rows)
    return part


def joint_rows(reads: Sequence[Read]) -> pd.DataFrame | None:
    """The rows of every read one after another, indexed from 0 (what concatenating their
    frames gives), taken from their joint frame in one go; None unless every read with rows
    is a part of one joint frame (files of several headers, or read alone)."""
    parts = [read.part for read in reads if not read.empty]
    if not parts or any(part is None or part.joint is not parts[0].joint for part in parts):
        return None
    joint = parts[0].joint
    starts = np.array([part.start for part in parts])
    rows = np.array([part.rows for part in parts])
    shift = starts - (np.cumsum(rows) - rows)  # where each part is, less where it goes
    if len(joint) == rows.sum() and not shift.any():
        taken = joint.copy(deep=False)  # the whole frame, in order: nothing to take
    else:
        taken = joint.take(np.arange(rows.sum()) + np.repeat(shift, rows))
    taken.index = pd.RangeIndex(len(taken))
    return taken
