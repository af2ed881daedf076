"""benchmarks/train_step.py --checkpointing-cost: the same update timed with gradient checkpointing off and on,
interleaved on one store, each mode's peak resident size taken separately."""
import argparse
import contextlib
import math

import pytest
from benchmarks import recipe_memory
from benchmarks import train_step as ts


class ScriptedPeaks:
    """PhasePeaks (tested in test_recipe_memory.py) with set peaks: the phase each update ran in is recorded."""
    current: list[str] = []

    @contextlib.contextmanager
    def phase(self, name):
        self.current.append(name)
        yield
        self.current.pop()

    def finish(self):
        return {"phases": {"off": 0.52, "on": 0.31}, "peak_gib": 0.52}


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_checkpointing_cost_alternates_the_modes_drops_the_warm_up_pair_and_reports_each_mode(monkeypatch):
    """Three off/on pairs of real updates on tiny-random (repeats=2 and a warm-up pair); the updates are given the
    times 9, 9 (warm-up), 1.0, 1.5, 2.0, 2.6 s and the modes the peaks 0.52 and 0.31 GiB, so every number is worked
    by hand: off [1.0, 2.0] (median 1.5), on [1.5, 2.6] (median 2.05), on/off per pair 1.5 and 1.3 (median 1.4),
    0.21 GiB saved."""
    seconds, seen = iter([9.0, 9.0, 1.0, 1.5, 2.0, 2.6]), []
    real_step = ts.selfevo_step

    def step(store, batch, adv):
        real_step(store, batch, adv)
        seen.append((ScriptedPeaks.current[-1], store.settings.gradient_checkpointing, store.is_untrained("agent")))
        return next(seconds)

    monkeypatch.setattr(ts, "selfevo_step", step)
    monkeypatch.setattr(recipe_memory, "PhasePeaks", ScriptedPeaks)
    monkeypatch.setattr(ts, "MODEL", "tiny-random")
    batch, adv = ts.make_batch(4, 48)
    out = ts.checkpointing_cost(argparse.Namespace(dtype="float32", micro_batch=2, repeats=2), batch, adv)
    assert seen == [("off", False, False), ("on", True, False)] * 3  # each a real update, in its mode's phase
    assert out["checkpointing"] == {"off": {"median_s": 1.5, "all_s": [1.0, 2.0], "peak_gib": 0.52},
                                    "on": {"median_s": 2.05, "all_s": [1.5, 2.6], "peak_gib": 0.31}}
    assert math.isclose(out["time_ratio"], 1.4) and math.isclose(out["peak_saved_gib"], 0.21)
