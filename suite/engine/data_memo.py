"""Datasets kept in memory across the runs of one process (a sweep), keyed by what defines them.

Workloads generate or read their data in ``load_data()``; a sweep of many short runs would do
that once per run. Here the last few datasets stay in memory, keyed by ``Workload.data_key()``.
The tensors are shared read-only: the training loop indexes them and never writes to them.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from dpsuite.engine import workload_calls
from dpsuite.workloads.base import Data, Datasets, Workload

KEEP = 2  # datasets kept; a sweep usually cycles through one or two
_memo: OrderedDict[tuple, Data | Datasets] = OrderedDict()
_seconds_loading = 0.0  # spent in load_data() by this process (generating or reading data)


def load_data(workload: Workload, limit_s: float | None = None) -> Data | Datasets:
    """``workload.load_data()`` within ``limit_s`` seconds (None: no limit) and checked
    (``workload_calls.load_data``), computed once per process for equal data keys."""
    key = workload.data_key()
    if key in _memo:
        _memo.move_to_end(key)
        return _memo[key]
    global _seconds_loading
    started = time.perf_counter()
    data = workload_calls.load_data(workload, limit_s)
    _seconds_loading += time.perf_counter() - started
    _memo[key] = data
    while len(_memo) > KEEP:
        _memo.popitem(last=False)
    return data


def clear() -> None:
    _memo.clear()


def seconds_loading() -> float:
    """Seconds this process has spent generating or reading datasets (memo misses)."""
    return _seconds_loading
