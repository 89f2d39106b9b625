"""Handing freed heap memory back to the OS after a large ingest batch.

Why: glibc's malloc keeps memory that was freed in the middle of its heap. Encoding a batch
allocates activation tensors of many sizes (one per length-sorted mini-batch), and once they
are freed the heap is full of holes that are never returned, so the resident set of an
ingest grows with every batch, much of it such free-but-resident memory (figures: docs/scale.md
"Memory"). `malloc_trim(0)` releases every free page, wherever it is; it is not free (figures:
docs/measurements.md, "Heap release after large batches"), so the writer calls it after
batches that encoded something sizeable, not after every small edit.

Nothing here changes what is stored or computed; on a C library without `malloc_trim` (musl,
macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return the C heap's free pages to the OS; True if the C library could (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
