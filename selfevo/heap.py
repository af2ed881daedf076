"""glibc's heap and tensors: return free pages to the operating system (``malloc_trim``), and map large blocks on
their own (``mallopt(M_MMAP_THRESHOLD)``); both no-ops elsewhere (macOS, musl).

glibc keeps the memory of freed tensors in its heap, and holes between live blocks stay resident: in a MAESTRO
rollout on the CPU the main heap held 1.48 GB of free chunks out of 2.35 GB (``malloc_info``), half of the
process's resident size (2.87 GB). ``malloc_trim(0)`` gives the free pages back, wherever they are in the heap.

Trimming after the fact cannot help *within* one forward pass. glibc serves a block of at least its mmap threshold
by a mapping of its own (unmapped on free), but it raises that threshold to the size of every mapped block freed
(up to 32 MB), after which blocks of a few MB come from the heap, whose free holes are too small for the next
layer's blocks: one checkpointed training forward of a MAESTRO slate (8 × 696 tokens, float32) grew the resident
size by 2.8 GB while the tensors it kept took 0.4 GB; with the threshold fixed at 1 MB, by 0.4-0.5 GB.
:func:`map_large_blocks` fixes it (which also stops the dynamic raise); ``build.policy_store`` calls it, so the loop
and the evaluation run with it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD = 1 << 20  # bytes: blocks of at least 1 MB get their own mapping


@functools.cache
def _libc(symbol: str):
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), symbol, None) if name else None
    except OSError:
        return None


def trim() -> bool:
    """Give free heap pages back to the OS; True if ``malloc_trim`` ran (glibc)."""
    fn = _libc("malloc_trim")
    if fn is None:
        return False
    fn(0)
    return True


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Serve every allocation of at least ``threshold`` bytes by its own mapping, returned to the OS when freed,
    for the rest of the process (glibc; see the module doc). True if set; False elsewhere, or when the user set
    ``MALLOC_MMAP_THRESHOLD_`` in the environment (theirs wins)."""
    if threshold <= 0:
        raise ValueError(f"threshold must be > 0 bytes, got {threshold}")
    fn = _libc("mallopt")
    if fn is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(fn(M_MMAP_THRESHOLD, threshold))
