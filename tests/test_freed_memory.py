"""Freed heap memory goes back to the OS before FSDP's evaluation copy (glibc's malloc_trim),
and nothing happens where the C library has no such call."""

from __future__ import annotations

import platform

import pytest
import torch

from dpsuite.runtime import freed_memory


@pytest.fixture
def fake_trim(monkeypatch):
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    monkeypatch.setattr(freed_memory, "_malloc_trim", lambda: trim)
    return calls


def test_every_arena_is_trimmed_to_nothing(fake_trim):
    assert freed_memory.release_freed_memory() is True
    assert fake_trim == [0]  # pad 0: keep nothing free at the top of the heap


def test_without_malloc_trim_nothing_is_released(monkeypatch):
    monkeypatch.setattr(freed_memory, "_malloc_trim", lambda: None)
    assert freed_memory.release_freed_memory() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_glibc_has_malloc_trim_and_it_runs():
    freed_memory._malloc_trim.cache_clear()
    assert freed_memory._malloc_trim() is not None
    kept = [torch.ones(1 << 16) for _ in range(64)]
    del kept[::2]
    assert isinstance(freed_memory.release_freed_memory(), bool)
