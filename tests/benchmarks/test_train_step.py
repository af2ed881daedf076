"""benchmarks/train_step.py --checkpointing-cost: the same update timed with gradient checkpointing off and on,
interleaved on one store, each mode's peak resident size taken separately."""
import argparse
import platform

import pytest

from benchmarks import train_step as ts

pytestmark = pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self")


def test_checkpointing_cost_times_both_modes_in_pairs_and_restores_nothing_it_should_not(monkeypatch):
    monkeypatch.setattr(ts, "MODEL", "tiny-random")
    batch, adv = ts.make_batch(4, 48)
    out = ts.checkpointing_cost(argparse.Namespace(dtype="float32", micro_batch=2, repeats=2), batch, adv)
    modes = out["checkpointing"]
    assert set(modes) == {"off", "on"} and all(len(m["all_s"]) == 2 for m in modes.values())  # warm-up pair dropped
    assert all(m["median_s"] > 0 and m["peak_gib"] > 0.1 for m in modes.values())
    assert out["time_ratio"] > 0 and out["peak_saved_gib"] == pytest.approx(
        modes["off"]["peak_gib"] - modes["on"]["peak_gib"], abs=0.011)
