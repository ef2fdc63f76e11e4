"""A file of token ids read memory-mapped as a Dataset of (input, target) sequences.

The file (nanoGPT's ``train.bin`` of uint16 ids, or raw bytes) is cut into non-overlapping
windows of ``context + 1`` tokens; a sample is one window as int64 inputs and the same tokens
shifted by one as targets. The file is opened with ``np.memmap`` in the process that reads it (a
rank or its loader worker) and only the windows asked for are paged in: nothing is read whole,
so a rank's memory does not grow with the file (the pages it touched count in its resident set
as page cache, which the system reclaims). The mapping is advised of random access (a shuffled
epoch reads windows all over the file): no read-ahead around each window.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from dpsuite.workloads.base import train_share


class TokenWindows(Dataset):
    """Windows ``windows`` (numbers of context + 1 token windows) of a token file."""

    def __init__(self, path: Path, dtype: type, context: int, windows: range) -> None:
        self.path, self.dtype, self.context, self.windows = path, dtype, context, windows
        self._tokens: np.memmap | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokens": None}  # each process maps the file itself

    def tokens(self) -> np.memmap:
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=self.dtype, mode="r")
            advise_random_access(self._tokens)
        return self._tokens

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        n = self.context + 1
        start = self.windows[index] * n
        seq = torch.from_numpy(self.tokens()[start : start + n].astype(np.int64))
        return seq[:-1], seq[1:]


def advise_random_access(tokens: np.memmap) -> None:
    """Tell the system the windows are read in random order: without it every page fault also
    reads ahead up to megabytes around the page (3.6 ms a window of a large file, here; 0.01 ms
    with the advice). Where numpy or the platform does not offer it, nothing changes."""
    mapping = getattr(tokens, "_mmap", None)
    advice = getattr(mmap, "MADV_RANDOM", None)
    if mapping is not None and advice is not None and hasattr(mapping, "madvise"):
        mapping.madvise(advice)


def window_count(path: Path, dtype: type, context: int) -> int:
    """Non-overlapping windows of ``context + 1`` tokens the file holds."""
    return path.stat().st_size // np.dtype(dtype).itemsize // (context + 1)


def spread_windows(available: int, count: int) -> range:
    """``count`` windows spaced evenly over ``available`` (all of them when count reaches it)."""
    count = min(count, available)
    step = available // count
    return range(0, count * step, step)


def token_splits(
    path: Path, dtype: type, context: int, windows: range
) -> tuple[TokenWindows, TokenWindows]:
    """The first 80 % of ``windows`` for training, the rest (the file's tail) for evaluation."""
    cut = train_share(len(windows))
    return (
        TokenWindows(path, dtype, context, windows[:cut]),
        TokenWindows(path, dtype, context, windows[cut:]),
    )
