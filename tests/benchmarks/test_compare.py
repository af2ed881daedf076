"""benchmarks/ablations/compare.py: its command line checked before any work (one line, exit 2), the tables built
from per-item records on hand-worked numbers, the presets it compares, run folders refused to another command, and
one whole comparison of the four methods on tiny-random."""
import json
import os
import subprocess
import sys

import pytest

from helpers.ablations import load
from helpers.paths import ROOT

compare = load("compare")
effect = compare.effect
UsageError = compare.UsageError


# ---- the command line ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["--methods", "sage,foo"], "unknown method 'foo'; valid: sage, azr, mae, grpo"),
    (["--methods", "sage,sage"], "--methods needs distinct methods"),
    (["--methods", "sage,azr,mae,grpo", "--preset", "paper"], "grpo has no preset 'paper'"),
    (["--preset", "nope"], "preset 'nope' is not one of cpu-learn, paper"),
    (["--benchmark", "arith,gsm9k"], "unknown benchmark 'gsm9k'"),
    (["--set", "foo:trainer.lr=1"], "'foo' is not eval or one of sage, azr, mae, grpo"),
    (["--set", "trainer.lr"], "is not [METHOD:|eval:]KEY=VALUE"),
    (["--n", "-1"], "--n and --seed take numbers >= 0"),
])
def test_bad_arguments_are_one_line_errors_before_any_work(argv, message, tmp_path):
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("|", r"\|")):
        compare.main([*argv, "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    assert not (tmp_path / "runs").exists() and not (tmp_path / "res").exists()


def test_the_script_says_it_in_one_line_with_exit_code_2():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks/ablations/compare.py"), "--methods", "sage,nope"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "compare.py: unknown method 'nope'; valid: sage, azr, mae, grpo\n"


def test_the_default_methods_are_those_with_the_preset(tmp_path):
    # paper: grpo has none, so the default is SAGE's Table 1 (sage, azr, mae); --table-only then needs the JSON
    with pytest.raises(UsageError, match="no .*compare_paper.json"):
        compare.main(["--preset", "paper", "--table-only", "--results", str(tmp_path)])


def test_set_scopes_keys_to_every_method_one_method_or_the_evaluations():
    train, evals = compare.parse_sets(["trainer.max_steps=1", "mae:protocol.proposals=1", "eval:limit=3",
                                       "sage:protocol.challenger_prefix=<question>"], ["sage", "mae"])
    assert train == {"sage": ["trainer.max_steps=1", "protocol.challenger_prefix=<question>"],
                     "mae": ["trainer.max_steps=1", "protocol.proposals=1"]}
    assert evals == ["limit=3"]


# ---- the presets compared -----------------------------------------------------------------------------------------
def _config(method, preset, extra=()):
    from selfevo.algorithms import RECIPES
    from selfevo.config import load_config
    row = compare.method_row(method, preset, list(extra))
    return load_config(RECIPES.get(method).config_class(), method, preset, list(row.overrides))


def test_cpu_learn_presets_train_the_same_model_for_sages_steps_and_mae_reads_sages_data():
    sage = _config("sage", "cpu-learn")
    for method in ("azr", "mae"):
        cfg = _config(method, "cpu-learn")
        assert list(cfg.model.backbones) == list(sage.model.backbones) == ["smollm2-135m-instruct"]
        assert (cfg.trainer.max_steps, cfg.trainer.lr, cfg.trainer.optimizer, cfg.sampling.max_new_tokens) == \
            (sage.trainer.max_steps, sage.trainer.lr, "task_relative", sage.sampling.max_new_tokens) == \
            (32, 1e-4, "task_relative", 160)
        assert cfg.eval.every == 0 and not cfg.eval.at_start  # compare.py evaluates after training
    mae, azr = _config("mae", "cpu-learn"), _config("azr", "cpu-learn")
    assert (list(mae.data.tasks), mae.data.limit) == (list(sage.data.tasks), sage.data.limit) == (["arith:train"], 1000)
    assert (mae.protocol.proposals, mae.protocol.solver_samples, mae.trainer.tasks_per_step) == \
        (sage.protocol.challenges, sage.protocol.solver_samples, sage.trainer.tasks_per_step)
    assert mae.protocol.reference_prob == 0.5  # "half reference", as SAGE's Table 1 trains MAE
    assert list(azr.data.tasks) == []  # AZR proposes its own programs


def test_paper_scale_trains_every_method_on_table_1s_backbone_for_200_steps():
    for method in ("sage", "azr", "mae"):
        cfg = _config(method, "paper")
        assert (list(cfg.model.backbones), cfg.trainer.max_steps) == ([compare.PAPER_MODEL], 200), method
    assert list(_config("azr", "paper").protocol.kinds) == ["deduction", "abduction", "induction"]
    assert f"model.backbones=[{compare.PAPER_MODEL}]" in compare.SCALES["paper"].eval
    assert compare.parse_benchmarks(None, compare.SCALES["paper"]) == list(compare.TABLE1)  # all registered
    assert len(compare.TABLE1) == 9


def test_cpu_learn_runs_are_effect_pys_rows_in_effect_pys_folders():
    for method in compare.METHODS:
        assert compare.method_row(method, "cpu-learn") == effect.ROWS[method]
    assert compare.SCALES["cpu-learn"].suffix == "" and list(compare.SCALES["cpu-learn"].eval) == effect.EVAL


def test_a_folder_trained_by_another_command_is_refused(tmp_path):
    row = compare.method_row("sage", "cpu-learn")
    where = tmp_path / "sage" / "seed0"
    where.mkdir(parents=True)
    argv = ["selfevo", "run", "sage", "--preset", "cpu-learn", "seed=0", f"output_dir={where}"]
    (where / "run.json").write_text(json.dumps([{"argv": argv}, {"argv": [*argv, "resume=true", "x=1"]}]))
    effect.check_same_command(where, row.command(where, 0))  # the same command: reused
    other = compare.method_row("sage", "cpu-learn", ["trainer.max_steps=64"])
    with pytest.raises(UsageError, match="was trained by `selfevo run sage --preset cpu-learn seed=0"):
        effect.check_same_command(where, other.command(where, 0))


# ---- tables from per-item records (hand-worked) -------------------------------------------------------------------
def _seed(before, after, chars=100):
    """A seed record as effect.py writes it, from per-item 0/1 lists (answers of ``chars`` characters)."""
    return effect.seed_record([{"correct": b, "chars": 0} for b in before], [{"correct": a, "chars": chars}
                                                                           for a in after], "cmd", [])


A, G = [0.0, 0.0, 1.0, 0.0], [1.0, 0.0]  # the untrained model on arith and gsm8k
RAW = {
    "arith": {"base": {"items": A, "answer_chars": 400.0},
              "per_seed": {"sage": {"0": _seed(A, [1, 0, 1, 0]), "1": _seed(A, [1, 1, 0, 0], 200)},
                           "azr": {"0": _seed(A, [0, 0, 1, 1])}, "mae": {"0": _seed(A, [0, 0, 0, 0])}}},
    "gsm8k": {"base": {"items": G, "answer_chars": 300.0},
              "per_seed": {"sage": {"0": _seed(G, [1, 1])}, "azr": {"0": _seed(G, [0, 0])}, "mae": {}}},
}


def test_rows_and_pairs_on_hand_worked_numbers():
    built = compare.build(RAW)
    arith = built["arith"]
    # sage over seeds 0, 1: items [1, .5, .5, 0] -> 0.5; paired with base [0, 0, 1, 0]: +0.25, +2/-1 items
    assert (arith["methods"]["sage"]["after"], arith["methods"]["sage"]["diff"]) == (0.5, 0.25)
    assert (arith["methods"]["mae"]["after"], arith["methods"]["mae"]["diff"]) == (0.0, -0.25)
    assert list(arith["pairwise"]) == ["sage − azr", "sage − mae", "azr − mae"]
    # sage − mae on the seed both have (0): [1, 0, 1, 0] - [0, 0, 0, 0]: mean 0.5, sample sd sqrt(1/3),
    # half-width 1.959964 * 0.577350 / 2 = 0.565793
    h = arith["pairwise"]["sage − mae"]
    assert h["seeds"] == ["0"] and h["diff"] == 0.5 and (h["improved"], h["worsened"]) == (2, 0)
    assert (h["low"], h["high"]) == (pytest.approx(0.5 - 0.565793, abs=1e-6), pytest.approx(1.065793, abs=1e-6))
    # sage − azr, seed 0: [1, 0, 1, 0] - [0, 0, 1, 1] = [1, 0, 0, -1]
    assert (arith["pairwise"]["sage − azr"]["diff"], arith["pairwise"]["sage − azr"]["improved"]) == (0.0, 1)
    # gsm8k: mae has no seed there, so it has no row and no pair
    assert list(built["gsm8k"]["methods"]) == ["sage", "azr"] and list(built["gsm8k"]["pairwise"]) == ["sage − azr"]
    assert built["gsm8k"]["pairwise"]["sage − azr"]["diff"] == 1.0


def test_the_table_has_table_1s_shape_and_every_benchmarks_rows():
    record = {"preset": "cpu-learn", "methods": ["sage", "azr", "mae"], "seeds": [0, 1], "n": 4,
              "eval": ["setup=vanilla"], "benchmarks": compare.build(RAW)}
    md = compare.table(record)
    assert "| model | arith | gsm8k | mean |" in md
    assert "| base (untrained) | 0.250 | 0.500 | 0.375 |" in md
    assert "| sage | 0.500 | 1.000 | 0.750 |" in md and "| mae | 0.000 | – | – |" in md
    assert "## arith (4 items)" in md and "## gsm8k (2 items)" in md
    assert "| sage − mae | 0 | +0.500 [-0.066, +1.066] | +2/−0 |" in md
    # effect.py's row: before/after with Wilson intervals, the paired change, +/- items, per-seed changes
    assert "| sage | 2 | 0.250 [0.046, 0.699] | 0.500 [0.150, 0.850] | +0.250 [" in md
    assert md == compare.table(json.loads(json.dumps(record)))  # the JSON alone rebuilds it


# ---- end to end ---------------------------------------------------------------------------------------------------
TINY = ["model.backbones=[tiny-random]", "model.dtype=float32", "sampling.max_new_tokens=8", "trainer.max_steps=1",
        "trainer.tasks_per_step=1", "log.tensorboard=false", "sage:protocol.challenges=1",
        "sage:protocol.solver_samples=1", "azr:protocol.rollouts=1", "mae:protocol.proposals=1",
        "mae:protocol.solver_samples=1", "grpo:trainer.prompt_reuse=2", "grpo:trainer.micro_batch=2",
        "eval:model.backbones=[tiny-random]", "eval:model.dtype=float32", "eval:sampling.max_new_tokens=8"]


FOLDER = effect.eval_folder("eval", [s[5:] for s in TINY if s.startswith("eval:")])  # effect.py's --eval-set


@pytest.mark.slow
def test_four_methods_train_evaluate_and_tabulate_on_tiny_random_then_reuse(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the runs' subprocesses import this checkout
    monkeypatch.setenv("SELFEVO_DATA", os.environ.get("SELFEVO_DATA", str(ROOT.parent / "shared" / "data")))
    argv = ["--methods", "sage,azr,mae,grpo", "--preset", "cpu-learn", "--n", "3", "--out", str(tmp_path / "runs"),
            "--results", str(tmp_path / "res"), *[x for s in TINY for x in ("--set", s)]]
    compare.main(argv)
    record = json.loads((tmp_path / "res" / "compare_cpu-learn.json").read_text())
    arith = record["benchmarks"]["arith"]
    assert list(arith["methods"]) == ["sage", "azr", "mae", "grpo"] and len(arith["pairwise"]) == 6
    assert len(arith["base"]["items"]) == 3
    for method, r in arith["methods"].items():
        seed = r["per_seed"]["0"]
        assert len(seed["items"]) == 3 and seed["steps"] == 1, method
        assert seed["command"].startswith(f"selfevo run {method} --preset cpu-learn model.backbones=[tiny-random]")
        assert (tmp_path / "runs" / method / "seed0" / FOLDER / "arith-vanilla" / "items.jsonl").exists()
    md = (tmp_path / "res" / "compare_cpu-learn.md").read_text()
    # again: nothing retrained (one launch in run.json), the same record; --table-only rebuilds the same Markdown
    compare.main(argv)
    assert json.loads((tmp_path / "res" / "compare_cpu-learn.json").read_text()) == record
    assert len(json.loads((tmp_path / "runs" / "mae" / "seed0" / "run.json").read_text())) == 1
    (tmp_path / "res" / "compare_cpu-learn.md").unlink()
    compare.main(["--preset", "cpu-learn", "--results", str(tmp_path / "res"), "--table-only"])
    assert (tmp_path / "res" / "compare_cpu-learn.md").read_text() == md
    # another command on the same folders is refused
    with pytest.raises(UsageError, match="was trained by"):
        compare.main([*argv, "--set", "trainer.lr=0.001"])
    # an evaluation folder holds one set of keys: another set is refused there (not silently reused)
    where = tmp_path / "runs" / "mae" / "seed0" / FOLDER
    with pytest.raises(UsageError, match="was evaluated with"):
        effect.evaluate(where, 3, [], True, "arith", [*effect.EVAL, "sampling.max_new_tokens=4"])


def test_the_committed_table_is_rebuilt_from_its_json_alone(tmp_path):
    committed = ROOT / "benchmarks" / "results"
    (tmp_path / "compare_cpu-learn.json").write_text((committed / "compare_cpu-learn.json").read_text())
    compare.main(["--preset", "cpu-learn", "--results", str(tmp_path), "--table-only"])
    assert (tmp_path / "compare_cpu-learn.md").read_text() == (committed / "compare_cpu-learn.md").read_text()
