"""Give freed heap memory back to the operating system.

glibc keeps the memory of freed tensors in its arenas; with the varying shapes of rollouts (long prefills, growing
KV caches) and updates, a CoMAS run's resident size climbed 4 → 8 GiB in 6 steps on the CPU machine while its live
tensors stayed ~1.5 GiB; resumed with glibc's trimming turned up (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX=2``)
the same run stayed at 1.6-3.9 GiB. ``malloc_trim(0)`` after each large phase does the same from inside the process
(the test gives back 232 of 240 MB of freed heap). Elsewhere (macOS, musl) this does nothing. Within a long
rollout the hf engine trims the heap itself every few seconds (:mod:`selfevo.heap`).
"""
from __future__ import annotations

import gc

from selfevo import heap


def release_freed_memory() -> bool:
    """Collect garbage, then return free heap pages to the OS (glibc); True if ``malloc_trim`` ran."""
    gc.collect()
    return heap.trim()
