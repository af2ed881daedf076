"""benchmarks/ablations/common.py: per-seed run directories and the aggregation over seeds (t-intervals, bands,
tables), on hand-worked numbers."""
import importlib.util
import json
import math

import pytest

from helpers.paths import ROOT

_PATH = ROOT / "benchmarks" / "ablations" / "common.py"
_spec = importlib.util.spec_from_file_location("ablation_common", _PATH)
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)


def test_mean_ci_hand_worked():
    # [1, 2, 3]: mean 2, sample sd 1, half-width t(0.975, 2) * 1 / sqrt(3) = 4.302653 / 1.73205 = 2.48414
    m, half, n = common.mean_ci([1, 2, 3])
    assert (m, n) == (2.0, 3) and half == pytest.approx(4.302653 / math.sqrt(3))
    assert half == pytest.approx(2.48414, abs=1e-5)
    # None values are left out: [1, 3] -> mean 2, sd sqrt(2), half = 12.706205 * sqrt(2) / sqrt(2)
    m, half, n = common.mean_ci([None, 1.0, 3.0])
    assert (m, n) == (2.0, 2) and half == pytest.approx(12.706205)
    assert common.mean_ci([0.5]) == (0.5, None, 1)
    assert common.mean_ci([None]) == (None, None, 0) and common.mean_ci([]) == (None, None, 0)
    assert common.mean_ci([0.7, 0.7, 0.7]) == (pytest.approx(0.7), pytest.approx(0.0), 3)


def test_fmt_ci():
    assert common.fmt_ci([1, 2, 3]) == "2.000 ± 2.484"
    assert common.fmt_ci([1.0, 3.0], 1) == "2.0 ± 12.7"
    assert common.fmt_ci([0.5]) == "0.500 (n=1)"
    assert common.fmt_ci([None, None]) == "–"


def test_per_seed_quarter_and_average():
    run8 = [{"step": i, "x": float(i + 1)} for i in range(8)]  # x = 1..8; a quarter = 2 steps
    run3 = [{"step": i, "x": [4.0, None, 6.0][i]} for i in range(3)]  # a quarter of 3 steps = 1 step
    first, last = common.quarter(lambda m: m["x"], False), common.quarter(lambda m: m["x"], True)
    assert common.per_seed([run8, run3, []], first) == [1.5, 4.0, None]
    assert common.per_seed([run8, run3], last) == [7.5, 6.0]
    assert common.per_seed([run8, run3], common.average(lambda m: m["x"])) == [4.5, 5.0]


def test_band_mean_and_interval_per_step():
    a = [{"step": 0, "x": 1.0}, {"step": 1, "x": 3.0}]
    b = [{"step": 0, "x": 3.0}, {"step": 1, "x": 5.0}, {"step": 2, "x": 7.0}]
    c = [{"step": 0, "x": None}, {"step": 1, "x": 4.0}]
    steps, mean, low, high = common.band([a, b], lambda m: m["x"])
    # steps 0, 1: two seeds 2 apart -> sd sqrt(2), half-width 12.7062; step 2: one seed, no interval
    assert steps == [0, 1, 2] and mean == [2.0, 4.0, 7.0]
    assert low == pytest.approx([2 - 12.7062, 4 - 12.7062, 7.0])
    assert high == pytest.approx([2 + 12.7062, 4 + 12.7062, 7.0])
    steps, mean, low, high = common.band([a, c], lambda m: m["x"])  # a None is not a value
    assert steps == [0, 1] and mean == [1.0, 3.5] and low[0] == high[0] == 1.0
    assert high[1] - mean[1] == pytest.approx(12.7062 * math.sqrt(0.5) / math.sqrt(2))


def test_seed_dir_keeps_old_single_seed_runs_as_seed_zero(tmp_path):
    assert common.seed_dir(tmp_path, "full", 0) == tmp_path / "full" / "seed0"
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.jsonl").write_text("")
    assert common.seed_dir(tmp_path, "old", 0) == old
    assert common.seed_dir(tmp_path, "old", 1) == old / "seed1"
    (old / "seed0").mkdir()
    assert common.seed_dir(tmp_path, "old", 0) == old / "seed0"


def test_sweep_reads_seeds_and_cuts_to_max_steps(tmp_path):
    for path, steps in ((tmp_path / "v", 3), (tmp_path / "v" / "seed2", 2)):  # seed 0: the old layout
        path.mkdir(parents=True, exist_ok=True)
        (path / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(steps)))
    rows = common.sweep("comas", tmp_path, {"v": []}, [0, 1, 2], [], run=False, max_steps=2)
    assert rows == {"v": {0: [{"step": 0}, {"step": 1}], 2: [{"step": 0}, {"step": 1}]}}


def comas_run(solver_reward, steps=4):
    return [{"step": i, "reward": {"a0": solver_reward}, "reward_by_role": {"solver": solver_reward, "evaluator": 0.5},
             "parse_failure_rate": 0.1, "length_by_role": {"solver": 100.0}, "precision": None, "recall": 0.5,
             "rollout_s": 2.0, "update_s": 1.0} for i in range(steps)]


def test_table_mean_and_interval_over_seeds_and_the_old_single_run_shape():
    md = common.table({"full": {0: comas_run(0.4), 1: comas_run(0.6)}, "old": comas_run(0.3), "none": {}})
    lines = md.splitlines()
    # two seeds 0.4 and 0.6: mean 0.5, sd 0.1414, half-width 12.7062 * 0.1414 / 1.4142 = 1.271
    assert lines[2] == ("| full | 2 | 4 | 0.500 ± 1.271 → 0.500 ± 1.271 | 0.100 ± 0.000 → 0.100 ± 0.000 |"
                        " 100.0 ± 0.0 | – | 0.500 ± 0.000 | 3.0 ± 0.0 |")
    assert lines[3].startswith("| old | 1 | 4 | 0.300 (n=1) → 0.300 (n=1) |")
    assert len(lines) == 6 and "95% t-interval" in lines[-1]  # the variant without runs is left out


def test_plot_writes_a_figure(tmp_path):
    pytest.importorskip("matplotlib")
    common.plot({"full": {0: comas_run(0.4), 1: comas_run(0.6)}, "old": comas_run(0.3)}, tmp_path / "c.png", "t")
    assert (tmp_path / "c.png").stat().st_size > 0
