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
# glibc without the fix (the problem, not selfevo's code) is slow: its own process, like the fix's
@pytest.mark.parametrize("fix", [True, pytest.param(False, marks=pytest.mark.slow)])
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


def test_layer_threshold_is_seven_eighths_of_a_layer_block_within_1_and_8_mb():
    from selfevo import heap

    # a MAESTRO slate: 4 rows × 700 tokens × hidden 576 × 4 B = 6,451,200 B; 7/8 of it = 5,644,800
    assert heap.layer_threshold(4 * 700 * 576 * 4) == 5_644_800
    assert heap.layer_threshold(16 * 700 * 576 * 4) == 8 << 20  # a CoMAS micro-batch: the cap
    assert heap.layer_threshold(0) == heap.layer_threshold(1000) == 1 << 20  # tiny or empty: the floor
    assert heap.layer_threshold(8 << 20) == 7 << 20  # exactly at the cap: 7/8 of it, so the block is mapped
    assert heap.layer_threshold(6 << 20, cap=4 << 20) == 4 << 20  # a store's own cap
    assert heap.layer_threshold(10, cap=5000) == 5000  # a cap under the floor: the cap
    for bad in [dict(block_bytes=-1), dict(block_bytes=10, cap=0), dict(block_bytes=10, floor=0)]:
        with pytest.raises(ValueError):
            heap.layer_threshold(**bad)


def test_policy_store_follows_layer_blocks_only_with_trainer_map_layer_blocks(monkeypatch):
    """``build.policy_store`` fixes the 8 MB threshold and hands it to the store as the cap of the layer threshold
    only with ``trainer.map_layer_blocks``; where it could not set it (not glibc, or the
    user's ``MALLOC_MMAP_THRESHOLD_``) the store leaves malloc alone either way."""
    from omegaconf import OmegaConf

    from selfevo import heap
    from selfevo.loop import build

    from selfevo.optimizers import TrainerCfg

    trainer = lambda on: OmegaConf.structured(TrainerCfg(map_layer_blocks=on))  # noqa: E731
    model = OmegaConf.create({"lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": None},
                              "device": "cpu", "dtype": "float32"})
    for settable in (True, False):
        monkeypatch.setattr(heap, "map_large_blocks", lambda threshold=heap.MMAP_THRESHOLD, ok=settable: ok)
        assert build.policy_store(model).settings.heap_threshold is None
        assert build.policy_store(model, trainer(False)).settings.heap_threshold is None
        want = heap.MMAP_THRESHOLD if settable else None
        assert build.policy_store(model, trainer(True)).settings.heap_threshold == want
