"""benchmarks/recipe_efficiency.py: measured vs predicted per phase — the figures on hand-worked numbers, bad
arguments, and (slow) the whole script on the tiny model with tiny grids."""
import json
import math

import pytest

from benchmarks import recipe_efficiency as re_
from benchmarks.step_model import Calibration, Table

CAL = Calibration(4, Table(((1, 8), (64, 256)), ((0.1, 0.3), (0.5, 1.7))), Table(((1, 4), (100, 300)),
                  ((1.0, 2.0), (3.0, 4.0))), Table(((128, 256),), (1.0, 2.0)), Table(((128, 256),), (0.3, 0.6)), 0.5)
STEP = {"step_s": 30.0, "rollout_s": 20.0, "update_s": 6.0, "concurrency": 4.0, "rollout_tokens": 100,
        "prefill_tokens": 500, "update_tokens": 1000, "trained_rows": 4,
        "rollout_shapes": {"prefill": [[1, 64, 2, 128]], "decode": [[4, 128, 5, 500]]},
        "update_shapes": {"train": [[4, 256, 2, 512]], "optimizer": [[16, 1, 4]]}}


def test_figures_put_the_prediction_beside_the_measurement():
    f = re_.figures(STEP, CAL, rollout_rate=50.0, train_rate=None)
    # rollout: 2 joins × 0.1 + 5 steps × 3.0 = 15.2; update: 2 micro-batches × 2.0 + one parameter update 0.5 = 4.5
    assert f["rollout_predicted_s"] == pytest.approx(15.2) and f["update_predicted_s"] == pytest.approx(4.5)
    assert f["rollout_measured_over_predicted"] == pytest.approx(20 / 15.2)
    assert f["update_measured_over_predicted"] == pytest.approx(6 / 4.5)
    assert (f["predicted_prefill_s"], f["predicted_decode_s"]) == pytest.approx((0.2, 15.0))
    assert (f["predicted_train_s"], f["predicted_score_s"], f["predicted_optimizer_s"]) == pytest.approx((4, 0, 0.5))
    assert f["rollout_efficiency"] == pytest.approx(5 / 50) and "update_efficiency" not in f  # no train rate
    assert "rollout_shapes" not in f and f["mean_row_tokens"] == 250


def test_table_lists_both_phases_at_both_batch_sizes():
    full = re_.median([re_.figures(STEP, CAL, None, None)])
    none = {**full, "update_measured_over_predicted": None}
    text = re_.table({"tasks_per_step": 32, "preset_tasks": 4, **full, "preset_tasks_per_step": none})
    lines = text.splitlines()
    assert lines[0].split() == ["phase", "tasks", "measured_s", "predicted_s", "measured/predicted"]
    assert lines[1].split() == ["rollout", "32", "20.00", "15.20", "1.32"]
    assert lines[2].split() == ["update", "32", "6.00", "4.50", "1.33"]
    assert lines[4].split()[-1] == "-"  # no ratio where nothing was predicted


@pytest.mark.parametrize("argv,message", [
    (["--steps", "0"], "--steps, --repeats and --tasks must be >= 1"),
    (["--decode-rows", "4,1"], "decode_rows: [4, 1] is not a strictly increasing list"),
    (["--decode-keys", "8"], "decode_keys must be >= 20"),
    (["--prefill-rows", "1,128"], "the engine's max_batch is 64"),
    (["--recipe", "nope"], "unknown recipe 'nope'"),
    (["bogus.key=1"], "unknown config key 'bogus'"),
    (["engine.name=vllm"], "the step model prices the HF engine's forwards; engine.name is 'vllm'"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys):
    assert re_.main([*argv, "--no-micro"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("recipe_efficiency: ") and message in err and "\n" not in err


TINY = ["--tasks", "1", "--steps", "1", "--repeats", "1", "--no-micro", "--prefill-rows", "1,2",
        "--prefill-widths", "16,64", "--decode-rows", "1,2", "--decode-keys", "32,64", "--decode-steps", "2",
        "--train-widths", "16,64", "model.backbones=[tiny-random]", "n_agents=2", "trainer.tasks_per_step=1",
        "sampling.max_new_tokens=4", "protocol.rounds=1", "protocol.score_max_new_tokens=2", "data.tasks=[arith:train]",
        "data.limit=10", "trainer.kl_coef=0.01", "trainer.kl_in_reward=false"]
# the KL as a loss term: the tiny random model's rewards are all alike (advantage 0), so without a loss term the update
# would run no row at all (selfevo.optimizers.base.gradient_rows) and there would be no train time to predict


@pytest.mark.slow
def test_the_whole_script_on_the_tiny_model(tmp_path, capsys):
    assert re_.main([*TINY, "--out", str(tmp_path / "result")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert json.loads((tmp_path / "result.json").read_text()) == result
    keys = ("rollout_predicted_s", "update_predicted_s", "rollout_measured_over_predicted",
            "update_measured_over_predicted")
    for figs in (result, result["preset_tasks_per_step"]):
        for key in keys:
            assert math.isfinite(figs[key]) and figs[key] > 0, key
        assert figs["predicted_prefill_s"] > 0 and figs["predicted_decode_s"] > 0
        # a micro-batch's train time is measured less the fixed cost of a parameter update (clamped at 0): on the
        # tiny model the two are within the timer's noise on a loaded machine, so 0 is a fair measurement here
        assert math.isfinite(figs["predicted_train_s"]) and figs["predicted_train_s"] >= 0
    assert "rollout_efficiency" not in result  # --no-micro
    assert [line.split()[:2] for line in out[-6:-1]] == [["phase", "tasks"], ["rollout", "1"], ["update", "1"],
                                                         ["rollout", "1"], ["update", "1"]]
    cal = Calibration.from_json(result["calibrations"][0])
    assert cal.decode.axes == ((1, 2), (32, 64)) and cal.micro_batch == 4
    assert all(v > 0 for row in cal.prefill.values + cal.decode.values for v in row)
    assert cal.optimizer_s > 0 and all(v >= 0 for v in cal.train.values + cal.score.values)
    shapes = result["shapes"]["full"]
    assert shapes["rollout_shapes"]["decode"] and shapes["update_shapes"]["train"]
