"""benchmarks/rl_step_vs_trl.py: the bound a rollout of no time would give, on hand-worked numbers."""
import sys

import pytest

from helpers.paths import ROOT


def _load_script():
    """Import the script with benchmarks/common.py (the ablations' own ``common`` is restored afterwards)."""
    saved = sys.modules.pop("common", None)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import rl_step_vs_trl
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        sys.modules.pop("common", None)
        if saved is not None:
            sys.modules["common"] = saved
    return rl_step_vs_trl


def test_update_bound_by_hand():
    script = _load_script()
    # first steps are warm-up: median(230, 240) = 235 over median(50, 46) = 48 -> 4.896 -> 4.9
    assert script.update_bound([400.0, 230.0, 240.0], [90.0, 50.0, 46.0]) == pytest.approx(4.9)
    # one measured step after the warm-up: that step alone
    assert script.update_bound([400.0, 200.0], [90.0, 40.0]) == pytest.approx(5.0)
