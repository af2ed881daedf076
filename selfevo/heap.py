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

A mapped block costs a page fault per 4 KB page each time it is made (the kernel zeroes every fresh page), so the
threshold trades speed for memory. One agent's checkpointed update of 16 CoMAS-like rows (11,401 tokens, fp32,
two threads, a fresh process; 2026-11-27): glibc's dynamic threshold 58.7 s and 3.00 GiB peak, fixed at 32 MB
59.6 s / 3.36 GiB, at 8 MB 60.5 s / 2.68 GiB, at 1 MB 88.4 s / 1.43 GiB (1.5x slower). 8 MB (the default) maps
the layer-sized blocks whose holes made the heap grow (a slate's 12.8 MB layer inputs, its MLP intermediates)
at ~3% of the update's time; smaller blocks come from the heap.

A fixed 8 MB misses the layer blocks of a small micro-batch: a MAESTRO slate's 4 rows share their prompt and run
packed as one ~900-token sequence, whose layer inputs (fp32, hidden 576) are ~2 MB, come from the heap and
fragment it (the cpu step's update peaked at 3.89 GiB; 2.05 GiB with the threshold at 1 MB).
:func:`layer_threshold` follows the micro-batch instead: 7/8 of one layer block's bytes, between 1 MB and 8 MB, so
the blocks the size of a layer's input are mapped whatever the rows and widths, and the smaller ones still come
from the heap. The store sets it before each training forward and restores its own after the update
(:class:`LayerBlocks`, ``StoreSettings(heap_threshold=...)``; ``build.policy_store`` sets it with
``trainer.map_layer_blocks``). Its
price is a page fault per fresh page of every mapped block: a MAESTRO-like update 1.54x slower
(``benchmarks/heap_threshold.py``), so it is off by default and on in MAESTRO's cpu preset.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
from typing import Iterator

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD = 8 << 20  # bytes: blocks of at least 8 MB get their own mapping (see the module doc)
MIN_THRESHOLD = 1 << 20  # the smallest threshold layer_threshold gives (below it, page faults cost 1.5x the update)


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


def layer_threshold(block_bytes: int, cap: int = MMAP_THRESHOLD, floor: int = MIN_THRESHOLD) -> int:
    """The mmap threshold that maps a forward's layer-sized blocks of ``block_bytes`` each (rows × tokens × hidden
    × bytes per value): ``7/8`` of it (so the block itself is at or above the threshold), clamped to
    ``[min(floor, cap), cap]``. E.g. 4 rows × 700 tokens × 576 × 4 B = 6,451,200 B -> 5,644,800; 16 rows of the
    same -> cap."""
    if block_bytes < 0 or floor <= 0 or cap <= 0:
        raise ValueError(f"need block_bytes >= 0, floor > 0 and cap > 0, got {block_bytes}, {floor}, {cap}")
    return max(min(floor, cap), min(cap, block_bytes * 7 // 8))


class LayerBlocks:
    """glibc's mmap threshold following each training forward's layer blocks (:func:`layer_threshold`, capped at
    ``cap`` bytes), set back to ``cap`` when an update ends; ``cap`` None leaves the process's malloc alone. The
    policy store keeps one (``StoreSettings.heap_threshold``): :meth:`fit` before a forward whose layer inputs are
    kept for the backward pass, :meth:`restored` around an update."""

    def __init__(self, cap: int | None):
        if cap is not None and cap <= 0:
            raise ValueError(f"cap must be None or > 0 bytes, got {cap}")
        self.cap = cap

    def fit(self, block_bytes: int) -> None:
        """Map blocks the size of one layer's input of ``block_bytes`` (rows × tokens × hidden × bytes per value)."""
        if self.cap:
            map_large_blocks(layer_threshold(block_bytes, cap=self.cap))

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        """The threshold back at ``cap`` when the block closes, however it closes."""
        try:
            yield
        finally:
            if self.cap:
                map_large_blocks(self.cap)
