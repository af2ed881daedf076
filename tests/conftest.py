import os

import pytest
import torch

# OMP_NUM_THREADS when set (tests/test_portable.py runs the float pins at 1 and 2 threads), else up to 2.
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or min(2, os.cpu_count() or 1)))


@pytest.fixture
def make_store():
    """PolicyStore factory in fp32 (exact comparisons) with agents on the given backbone."""
    from selfevo.policy import LoraSettings, PolicyStore, StoreSettings

    def make(agents=("a0", "a1"), backbone="tiny-random", dtype="float32", lr=1e-2, **kw):
        store = PolicyStore(StoreSettings(dtype=dtype, lora=LoraSettings(r=8, alpha=16), lr=lr, **kw))
        for a in agents:
            store.add_agent(a, backbone)
        return store

    return make

