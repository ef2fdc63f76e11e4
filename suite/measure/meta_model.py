"""What the meta device tells of a workload's model before any rank starts (its parameters, a
forward's activations), without allocating it: the workload's own code run contained, and each
answer kept for the life of the process per model config (and batch).

A sweep's points share a few models and batches, and each meta build or forward costs 0.1-1 s
(a plugin that hangs there, up to ``META_LIMIT_S``); the up-front checks of every point would
otherwise build the same model again and again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from dpsuite.workloads.base import Workload
from dpsuite.workloads.contained import Escaped, call_contained

META_LIMIT_S = 60.0  # a model built, and run once, on the meta device allocates nothing

T = TypeVar("T")
_MEASURED: dict[tuple, object] = {}


def forget_measurements() -> None:
    """Drop what ``measured_once`` kept (a model's code changed within this process)."""
    _MEASURED.clear()


def measured_once(kind: str, workload: Workload, batch: int, compute: Callable[[], T]) -> T:
    """``compute()`` for this workload's model config at ``batch``, computed once per process."""
    try:
        config = repr(workload.config)
    except Exception:  # a plugin's config that cannot say what it is: measured every time
        return compute()
    key = (kind, type(workload).__module__, type(workload).__qualname__, config, batch)
    if key not in _MEASURED:
        _MEASURED[key] = compute()
    return _MEASURED[key]  # type: ignore[return-value]


def on_meta_model(kind: str, workload: Workload, read: Callable[[nn.Module], T]) -> T | None:
    """``read`` of the workload's model built on the meta device, once per process per model
    config (``kind`` names what is read); None when the workload's own code cannot build it
    there (whatever it raises or however it exits: its run says why when it loads)."""

    def build_and_read() -> T:
        with torch.device("meta"):  # a thread's own mode: entered in the contained thread
            model = workload.build_model()
        return read(model)

    def contained() -> T | None:
        try:
            return call_contained(build_and_read, META_LIMIT_S, "meta-model")
        except Escaped:
            return None

    return measured_once(kind, workload, 0, contained)
