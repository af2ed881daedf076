"""Return free heap pages to the operating system (glibc's ``malloc_trim``); a no-op elsewhere (macOS, musl).

glibc keeps the memory of freed tensors in its heap, and holes between live blocks stay resident: in a MAESTRO
rollout on the CPU the main heap held 1.48 GB of free chunks out of 2.35 GB (``malloc_info``), half of the
process's resident size (2.87 GB). ``malloc_trim(0)`` gives the free pages back, wherever they are in the heap.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc_trim():
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def trim() -> bool:
    """Give free heap pages back to the OS; True if ``malloc_trim`` ran (glibc)."""
    fn = _libc_trim()
    if fn is None:
        return False
    fn(0)
    return True
