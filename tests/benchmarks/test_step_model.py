"""benchmarks/step_model.py: the tables' interpolation and the step's predicted time, on hand-worked numbers."""
import math

import pytest

from benchmarks.step_model import Calibration, Table, measured_over_predicted, predict_rollout, predict_update

# D(rows, keys) = 1 + 2·rows + 0.01·keys + 0.001·rows·keys on the grid rows (1, 4) × keys (100, 300)
DECODE = Table(((1, 4), (100, 300)), ((1 + 2 + 1 + 0.1, 1 + 2 + 3 + 0.3), (1 + 8 + 1 + 0.4, 1 + 8 + 3 + 1.2)))


def test_bilinear_interpolation_reproduces_a_bilinear_cost_inside_the_grid():
    exact = lambda r, k: 1 + 2 * r + 0.01 * k + 0.001 * r * k  # noqa: E731
    for r, k in ((1, 100), (4, 300), (2, 150), (3.5, 250)):
        assert DECODE(r, k) == pytest.approx(exact(r, k))


def test_outside_the_grid_clamped_below_and_extrapolated_above():
    t = Table(((10, 20),), (1.0, 3.0))
    assert t(0) == t(10) == 1.0  # below the first point: its value
    assert t(30) == pytest.approx(5.0)  # above: the last segment's slope (0.2 per unit) continued
    falling = Table(((10, 20),), (3.0, 1.0))
    assert falling(40) == 1.0  # a falling last segment: slope floored at 0
    one = Table(((8,),), (2.5,))
    assert one(1) == one(8) == one(100) == 2.5  # a single point: constant
    # 2-D above both grids: rows 7 (+3 past 4), keys 500 (+200 past 300) extrapolate the bilinear cost exactly
    assert DECODE(7, 500) == pytest.approx(1 + 14 + 5 + 3.5)


def test_tables_refuse_bad_grids_and_round_trip_through_json():
    with pytest.raises(ValueError, match="strictly increasing"):
        Table(((2, 2),), (1.0, 1.0))
    with pytest.raises(ValueError, match="2 values for a grid of 3"):
        Table(((1, 2, 3),), (1.0, 1.0))
    with pytest.raises(ValueError, match="2 coordinates"):
        DECODE(1)
    assert Table.from_json(DECODE.to_json()) == DECODE


def _calibration() -> Calibration:
    prefill = Table(((1, 8), (64, 256)), ((0.1, 0.3), (0.5, 1.7)))
    train = Table(((128, 256),), (1.0, 2.2))
    score = Table(((128, 256),), (0.3, 0.7))
    return Calibration(4, prefill, DECODE, train, score, optimizer_s=0.05)


def test_rollout_prediction_prices_each_entry_at_its_mean_size():
    cal = _calibration()
    shapes = {"prefill": [[1, 64, 2, 128],  # two 1-row joins of 64: 2 × 0.1
                          [8, 192, 1, 160]],  # one 8-row join of 160: halfway 64..256 → 0.5 + 0.6 = 1.1
              "decode": [[4, 192, 10, 2000],  # 10 steps at 4 rows × 200 keys: 10 × (1 + 8 + 2 + 0.8)
                         [1, 128, 3, 300]],  # 3 steps at 1 row × 100 keys: 3 × (1 + 2 + 1 + 0.1)
              "merge": [[5, 512, 2, 900]]}  # not priced
    got = predict_rollout(shapes, cal)
    assert got["prefill_s"] == pytest.approx(0.2 + 1.1)
    assert got["decode_s"] == pytest.approx(10 * 11.8 + 3 * 4.1)
    assert got["total_s"] == pytest.approx(got["prefill_s"] + got["decode_s"])


def test_update_prediction_counts_rows_per_micro_batch_and_parameter_updates():
    cal = _calibration()
    shapes = {"train": [[4, 192, 2, 384],  # two full micro-batches of width 192: 2 × 1.6
                        [2, 256, 1, 256],  # half a micro-batch of width 256: 0.5 × 2.2
                        [6, 384, 1, 300]],  # 6 rows (a slate kept whole) of width 300: 1.5 × (2.2 + 44 × 1.2 / 128)
              "score": [[4, 128, 3, 384]],  # three no-grad micro-batches of 128: 3 × 0.3
              "row": [[192, 14, 2000]],  # not priced (the micro-batches are)
              "optimizer": [[16, 2, 20], [48, 1, 40]]}  # three steps: 3 × 0.05
    got = predict_update(shapes, cal)
    assert got["train_s"] == pytest.approx(2 * 1.6 + 0.5 * 2.2 + 1.5 * (2.2 + 44 * 1.2 / 128))
    assert got["score_s"] == pytest.approx(0.9)
    assert got["optimizer_s"] == pytest.approx(0.15)
    assert got["total_s"] == pytest.approx(got["train_s"] + 0.9 + 0.15)


def test_empty_shapes_predict_nothing_and_have_no_ratio():
    cal = _calibration()
    assert predict_rollout({}, cal)["total_s"] == 0 and predict_update({}, cal)["total_s"] == 0
    assert predict_rollout({"decode": []}, cal)["decode_s"] == 0
    assert measured_over_predicted(3.0, 0.0) is None
    assert measured_over_predicted(3.0, 2.0) == 1.5 and math.isfinite(measured_over_predicted(1.0, 1e-9))


def test_calibration_round_trips_through_json():
    cal = _calibration()
    assert Calibration.from_json(cal.to_json()) == cal
