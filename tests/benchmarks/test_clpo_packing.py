"""benchmarks/clpo_packing.py: the timed path (both layouts updated on a real model, interleaved after a warm-up pair)
writes what the count-only path counts, on a clock the test moves."""
import json
import sys
import types

import pytest

from benchmarks import clpo_packing as cp
from benchmarks import common

SHAPES = ["--slates", "2", "--rows", "2", "--prompt", "12", "--rationale", "4", "--decision", "2",
          "--candidates", "2"]


@pytest.mark.slow  # a benchmark script's test, four updates of tiny-random: not needed for a quick check
def test_timed_layouts_write_medians_and_the_counted_positions(monkeypatch, tmp_path):
    """Each update takes 1 s more than the one before on the test's clock: the warm-up pair 1 and 2 s, then before
    3 and 5 s, clpo 4 and 6 s: medians 4 and 5, ratios 4/3 and 6/5 (median of two: their mean)."""
    clock = [0.0]
    ticks = iter(range(1, 100))

    def perf_counter():
        return clock[0]

    real_update = cp.PolicyStore.update

    def update(self, agent, batch, loss_fn):
        out = real_update(self, agent, batch, loss_fn)
        clock[0] += next(ticks)
        return out

    monkeypatch.setattr(cp, "MODEL", "tiny-random")
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(cp, "time", types.SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(cp.PolicyStore, "update", update)
    monkeypatch.setattr(sys, "argv", ["clpo_packing.py", *SHAPES, "--count-only"])
    cp.main()
    counted = json.loads((tmp_path / "clpo_packing_positions.json").read_text())
    monkeypatch.setattr(sys, "argv", ["clpo_packing.py", *SHAPES, "--repeats", "2", "--dtype", "float32"])
    cp.main()
    out = json.loads((tmp_path / "clpo_packing.json").read_text())
    assert out["layouts"]["before"]["all_s"] == [3.0, 5.0] and out["layouts"]["clpo"]["all_s"] == [4.0, 6.0]
    assert out["layouts"]["before"]["median_s"] == 4.0 and out["layouts"]["clpo"]["median_s"] == 5.0
    assert out["time_ratio"] == round((4 / 3 + 6 / 5) / 2, 3)
    for name in ("before", "clpo"):  # the timed path counts what the count-only path counts
        assert out["layouts"][name]["positions"] == counted["positions"][name]
    assert out["positions_ratio"] == counted["positions_ratio"] and out["dtype"] == "float32"
