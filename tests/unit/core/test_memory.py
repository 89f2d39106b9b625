"""`core.memory.release_free_heap`: freed-but-resident heap memory really goes back to the OS.

The ingest writer calls it after large batches (flows/sync.py); the figures it buys are in
docs/scale.md "Memory" (`bench/ingest.py`). Here the heap is fragmented on purpose: freed
blocks pinned between live ones stay resident (glibc only trims the top of the heap by
itself) until the trim releases them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragstream.core.memory import release_free_heap

BLOCK = 64 * 1024  # below glibc's mmap threshold (128 KiB), so the blocks live in the heap
BLOCKS = 800  # 50 MiB


def rss_anon_mib() -> float:
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^RssAnon:\s+(\d+) kB", status, re.MULTILINE)
    assert found is not None
    return int(found.group(1)) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_release_free_heap_returns_fragmented_free_memory() -> None:
    release_free_heap()
    blocks = [bytearray(BLOCK) for _ in range(BLOCKS)]
    for block in blocks:
        block[::4096] = b"\x01" * len(block[::4096])  # touch every page: resident for sure
    pins = [*blocks[::16], blocks[-1]]  # live blocks between the holes, and at the top
    del blocks
    freed_mib = (BLOCKS - len(pins)) * BLOCK / 2**20
    before = rss_anon_mib()
    if not release_free_heap():
        pytest.skip("the C library has no malloc_trim (not glibc)")
    after = rss_anon_mib()
    assert before - after > 0.5 * freed_mib, (before, after, freed_mib)
    assert len(pins) == BLOCKS // 16 + 1  # the pins stayed alive through the trim
