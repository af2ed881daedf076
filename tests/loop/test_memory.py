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


def _mapped_bytes() -> int:
    """glibc's ``mallinfo2().hblkhd``: bytes in blocks that have a mapping of their own."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    fn = getattr(ctypes.CDLL(None), "mallinfo2", None)
    if fn is None:
        pytest.skip("glibc < 2.33 has no mallinfo2")
    fn.restype = Info
    return fn().hblkhd


LARGE_BLOCK = """
import sys, torch
sys.path[:0] = [{root!r}, {tests!r}]
from selfevo import heap
from test_memory import _mapped_bytes
big = torch.ones(16 << 20, dtype=torch.uint8)  # mapped; freeing it raises glibc's dynamic threshold to 16 MB
del big
fixed = {fix} and heap.map_large_blocks(1 << 20)
before = _mapped_bytes()
block = torch.ones(4 << 20, dtype=torch.uint8)  # 4 MB: under the raised threshold, over the fixed one
during = _mapped_bytes()
del block
print(fixed, during - before, _mapped_bytes() - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
@pytest.mark.parametrize("fix", [True, False])
def test_large_blocks_get_their_own_mapping_even_after_a_larger_one_was_freed(fix):
    """In a fresh process (a heap with free holes of 4 MB may serve the block whatever the threshold): with the
    fixed threshold a 4 MB block is mapped on its own and unmapped when freed; with glibc's dynamic one, raised by
    freeing a 16 MB block, it comes from the heap."""
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    code = LARGE_BLOCK.format(root=str(tests.parents[1]), tests=str(tests), fix=fix)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    fixed, mapped, left = out.stdout.split()
    assert fixed == str(fix)
    assert (int(mapped) >= 4 << 20) is fix  # its own mapping, not a hole in the heap (and vice versa)
    assert int(left) == 0  # unmapped when freed: back to the OS


def test_map_large_blocks_leaves_the_users_setting_and_refuses_nonsense(monkeypatch):
    from selfevo import heap

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert heap.map_large_blocks() is False
    with pytest.raises(ValueError, match="> 0 bytes"):
        heap.map_large_blocks(0)
