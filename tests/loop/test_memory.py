"""release_freed_memory: freed heap pages go back to the OS (glibc), so long runs keep their resident size."""
import platform

import pytest

from selfevo.loop.memory import release_freed_memory


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_small_blocks_are_returned_to_the_os():
    blocks = [bytearray(60_000) for _ in range(4000)]  # ~240 MB below the mmap threshold: lives in the heap
    keep = bytearray(60_000)  # allocated last, so the heap's top is in use and plain free() cannot shrink it
    for b in blocks:
        b[::4096] = b"\x01" * len(b[::4096])  # touch every page
    del blocks
    before = _rss_kib()
    assert release_freed_memory()
    assert before - _rss_kib() > 100_000  # > 100 MB given back
    del keep
