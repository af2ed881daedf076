"""benchmarks/rl_step_vs_trl.py: the bound a rollout of no time would give, on hand-worked numbers."""
import pytest

from benchmarks import rl_step_vs_trl as script


def test_update_bound_by_hand():
    # first steps are warm-up: median(230, 240) = 235 over median(50, 46) = 48 -> 4.896 -> 4.9
    assert script.update_bound([400.0, 230.0, 240.0], [90.0, 50.0, 46.0]) == pytest.approx(4.9)
    # one measured step after the warm-up: that step alone
    assert script.update_bound([400.0, 200.0], [90.0, 40.0]) == pytest.approx(5.0)
