"""Give the memory a process has freed back to the OS (glibc's ``malloc_trim``).

glibc keeps freed blocks below its mmap threshold in the heap for reuse; the threshold grows
with the largest block freed (up to 32 MiB), so after a few steps of a large model most
tensors live in a heap whose freed holes still count in the resident set. Before a rank
allocates something as large as a whole copy of the model (FSDP's evaluation copy), trimming
returns those holes, so the copy takes their place instead of coming on top of them. Where the
C library has no ``malloc_trim`` (macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_freed_memory() -> bool:
    """Return the freed heap memory of every arena to the OS; whether anything was released
    (False where there is no ``malloc_trim``)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
