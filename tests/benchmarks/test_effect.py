"""benchmarks/ablations/effect.py and grpo_vs_trl.py: rows over seeds on hand-worked numbers, the table rebuilt from
the JSON alone, and the rows' commands."""
import json
from pathlib import Path

import pytest

from helpers.ablations import load as _load
from helpers.paths import ROOT

effect = _load("effect")
grpo_vs_trl = _load("grpo_vs_trl")

BASE = {"items": [0.0, 0.0, 1.0, 0.0], "answer_chars": 400.0}
SEEDS = {"0": {"items": [1.0, 0.0, 1.0, 0.0], "accuracy": 0.5, "diff": 0.25, "answer_chars": 100.0, "train_s": 10.0},
         "1": {"items": [1.0, 1.0, 0.0, 0.0], "accuracy": 0.5, "diff": 0.25, "answer_chars": 200.0, "train_s": 20.0}}


def test_row_summary_pairs_the_seed_averaged_items():
    r = effect.row_summary(BASE, SEEDS, "about", "agent0")
    # seed-averaged items [1, 0.5, 0.5, 0]; differences from before [1, 0.5, -0.5, 0]: mean 0.25,
    # sample sd sqrt(((0.75)^2 + 0.25^2 + 0.75^2 + 0.25^2) / 3) = sqrt(1.25 / 3) = 0.645497; half = 1.96 * sd / 2
    assert (r["before"], r["after"], r["diff"]) == (0.25, 0.5, 0.25)
    assert r["diff_low"] == pytest.approx(0.25 - 1.959964 * 0.645497 / 2, abs=1e-5)
    assert (r["improved"], r["worsened"], r["seeds"]) == (2, 1, [0, 1])
    assert (r["chars_before"], r["chars_after"], r["train_s"]) == (400.0, 150.0, 15.0)
    # both seeds changed by +0.25: no spread between runs, a point (its column shows it)
    assert (r["over_seeds"]["low"], r["over_seeds"]["high"]) == pytest.approx((0.25, 0.25))
    assert "| +0.250, +0.250 | [+0.250, +0.250] |" in effect.table({"x": r})


def test_the_table_shows_the_spread_between_seeds_which_the_paired_interval_does_not_count():
    # seeds' changes +0.1, +0.2, +0.3: mean 0.2, s = 0.1, half = t(2) 4.302653 * 0.1 / sqrt(3) = 0.248414
    seeds = {str(i): {"items": [1.0, 0.0, 1.0, 0.0], "diff": d} for i, d in enumerate((0.1, 0.2, 0.3))}
    r = effect.row_summary(BASE, seeds)
    assert (r["over_seeds"]["low"], r["over_seeds"]["high"]) == pytest.approx((-0.048414, 0.448414), abs=1e-6)
    assert "| +0.100, +0.200, +0.300 | [-0.048, +0.448] |" in effect.table({"x": r})
    # one seed: no spread to estimate, no interval; a legacy row without seeds: none either
    one = effect.row_summary(BASE, {"0": seeds["0"]})
    assert one["over_seeds"]["low"] is None and "| +0.100 | – |" in effect.table({"x": one})
    legacy = {k: v for k, v in r.items() if k not in ("per_seed", "over_seeds")}
    assert "| – | – |" in effect.table({"x": legacy})
    # a row merged before the key existed gets it from its seeds; a row that has it, or has no seeds, is left alone
    old = {k: v for k, v in r.items() if k != "over_seeds"}
    methods = {"old": old, "new": dict(r), "legacy": legacy}
    assert effect.refresh_over_seeds(methods) == ["old"] and methods["old"]["over_seeds"] == r["over_seeds"]
    assert effect.refresh_over_seeds(methods) == [] and "over_seeds" not in methods["legacy"]


def test_row_summary_one_seed_equal_items_is_a_zero_change():
    r = effect.row_summary(BASE, {"0": {"items": list(BASE["items"]), "diff": 0.0}})
    assert (r["diff"], r["diff_low"], r["diff_high"], r["improved"], r["worsened"]) == (0.0, 0.0, 0.0, 0, 0)
    assert r["chars_after"] is None and "| 0.250" in effect.table({"x": r})


def test_every_row_has_a_command_with_its_seed_and_folder():
    for name, row in effect.ROWS.items():
        cmd = row.command(Path("runs/effect") / name / "seed2", 2)
        assert ("seed=2" in cmd or cmd[-1] == "2") and str(Path("runs/effect") / name / "seed2") in " ".join(cmd), name
    assert effect.shown(effect.ROWS["grpo"].command(Path("d"), 1)) == \
        "selfevo run grpo --preset cpu-learn seed=1 output_dir=d"


def test_set_overrides_follow_the_rows_own_and_are_in_the_shown_command():
    cmd = effect.ROWS["comas_judge_1.0"].command(Path("d"), 0, ("model.dtype=float32",))
    assert effect.shown(cmd) == ("selfevo run comas --preset cpu-learn reward.judge=noisy_judge "
                                 "reward.judge_accuracy=1.0 model.dtype=float32 seed=0 output_dir=d")
    assert effect.ROWS["trl_grpo"].command(Path("d"), 3, ("a=1",))[-3:] == ["d", "3", "a=1"]


def test_recorded_base_is_reused_only_for_the_same_evaluation():
    rec = {"base": effect.base_record([{"correct": 1.0, "chars": 4}, {"correct": 0.0, "chars": 2}], 2)}
    assert [b["correct"] for b in effect.recorded_base(rec, 2)] == [1.0, 0.0]
    assert effect.base_record(effect.recorded_base(rec, 2), 2) == rec["base"]
    assert effect.recorded_base(rec, 3) is None and effect.recorded_base({}, 2) is None


def test_an_evaluation_is_reused_only_with_its_keys(tmp_path, monkeypatch, capsys):
    from selfevo.errors import UsageError

    folder = tmp_path / "eval" / "arith-vanilla"
    folder.mkdir(parents=True)
    (folder / "items.jsonl").write_text('{"correct": true, "final_response": "7"}\n')
    ran = []
    monkeypatch.setattr(effect, "sh", ran.append)
    # made before eval_keys.json was kept: reused, and the run says so
    assert effect.evaluate_all(tmp_path / "eval", 1, [], True, ["arith"], ["a=1"])["arith"] == [
        {"correct": 1.0, "chars": 1, "answer": "7"}]
    assert "reused unchecked" in capsys.readouterr().out and not ran
    (folder / "eval_keys.json").write_text('["a=1", "adapters=[x]"]')
    assert effect.evaluate_all(tmp_path / "eval", 1, ["adapters=[x]"], True, ["arith"], ["a=1"])["arith"]
    with pytest.raises(UsageError, match="was evaluated with a=1 adapters=.x., not a=2 adapters=.x.: use another"):
        effect.evaluate_all(tmp_path / "eval", 1, ["adapters=[x]"], True, ["arith"], ["a=2"])
    assert not ran


def test_a_new_evaluation_keeps_its_keys(tmp_path, monkeypatch):
    def fake_eval(cmd):  # what selfevo eval leaves: the items
        (tmp_path / "eval" / "gsm8k-vanilla").mkdir(parents=True)
        (tmp_path / "eval" / "gsm8k-vanilla" / "items.jsonl").write_text('{"correct": false, "final_response": ""}\n')

    monkeypatch.setattr(effect, "sh", fake_eval)
    effect.evaluate_all(tmp_path / "eval", 1, ["b=2"], True, ["gsm8k"], ["a=1"])
    assert (tmp_path / "eval" / "gsm8k-vanilla" / "eval_keys.json").read_text() == '["a=1", "b=2"]\n'


def test_grpo_vs_trl_compares_on_the_seeds_both_have():
    rows = {"grpo": effect.row_summary(BASE, SEEDS), "trl_grpo": effect.row_summary(BASE, {"0": SEEDS["1"]})}
    runs = {"grpo": {"0": [{"step_s": 2.0}, {"step_s": 4.0}, {"step_s": 3.0}], "1": []}, "trl_grpo": {"0": []}}
    out = grpo_vs_trl.compare(rows, runs)
    assert out["grpo"]["s_per_step"] == {"0": 3.0, "1": None}
    # seed 0 only: selfevo [1, 0, 1, 0] - TRL [1, 1, 0, 0] = [0, -1, 1, 0]: mean 0
    h = out["selfevo_minus_trl"]
    assert h["seeds"] == ["0"] and h["diff"] == 0.0 and (h["improved"], h["worsened"]) == (1, 1)
    assert "selfevo − TRL" in grpo_vs_trl.table(out)
    # grpo's two seeds both changed by +0.25: a point over seeds; trl_grpo's one seed: no interval
    assert "| +0.250 [-0.383, +0.883] | [+0.250, +0.250] |" in grpo_vs_trl.table(out)
    assert out["trl_grpo"]["over_seeds"]["low"] is None
    assert h["over_seeds"]["k"] == 1 and "over seeds" not in grpo_vs_trl.table(out).split("selfevo − TRL")[1]
    # two common seeds: gaps +0.25 - 0.0 and +0.25 - 0.5 = +0.25, -0.25: mean 0, s = 0.353553, half = 12.706205 * 0.25
    trl = effect.row_summary(BASE, {"0": {**SEEDS["0"], "diff": 0.0}, "1": {**SEEDS["1"], "diff": 0.5}})
    both = grpo_vs_trl.compare({"grpo": rows["grpo"], "trl_grpo": trl}, {"grpo": {}, "trl_grpo": {}})
    gap = both["selfevo_minus_trl"]["over_seeds"]
    assert (gap["mean"], gap["low"], gap["high"]) == pytest.approx((0.0, -3.176551, 3.176551), abs=1e-6)
    assert "over seeds (t 95%, seed s against seed s) [-3.177, +3.177]" in grpo_vs_trl.table(both)


def test_grpo_vs_trl_keeps_the_recorded_curve_of_a_seed_whose_run_is_gone(tmp_path):
    (tmp_path / "grpo" / "seed1").mkdir(parents=True)
    (tmp_path / "grpo" / "seed1" / "metrics.jsonl").write_text(json.dumps({"step": 0, "step_s": 5.0}) + "\n")
    rows = {"grpo": {"per_seed": {"0": {}, "1": {}}}, "trl_grpo": {"per_seed": {"0": {}}}}
    kept = {"grpo": {"0": [{"step": 0, "step_s": 9.0}], "1": [{"step": 0, "step_s": 1.0}]}}
    runs = grpo_vs_trl.run_curves(rows, tmp_path, kept)
    assert runs["grpo"]["0"] == kept["grpo"]["0"]  # folder gone: the recorded curve
    assert runs["grpo"]["1"][0]["step_s"] == 5.0  # folder there: its own curve, not the record's
    assert runs["trl_grpo"]["0"] == []  # neither


def test_a_copied_adapter_is_bf16_peft_that_loads_and_changes_the_model(make_store, tmp_path):
    """effect.py --adapters' copy (what benchmarks/results/adapters.json hashes; the files stay out of git) of an
    adapter built here: PEFT loads it onto a fresh base and it changes the logits, as the bf16 cast of the trained
    tensors."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from helpers.adapters import randomize_adapters
    from selfevo import models

    store = make_store(("a0",))
    randomize_adapters(store)
    trained = store.save_adapter("a0", tmp_path / "run" / "adapters" / "final" / "agent0")
    effect.copy_adapter(trained, tmp_path / "copy")
    full = load_file(str(trained / "adapter_model.safetensors"))
    copied = load_file(str(tmp_path / "copy" / "adapter_model.safetensors"))
    assert copied.keys() == full.keys() and {t.dtype for t in copied.values()} == {torch.bfloat16}
    assert all(torch.equal(copied[k], full[k].to(torch.bfloat16)) for k in full)
    ids = torch.tensor([[1, 2, 3, 4]])
    base = models.load_model("tiny-random", dtype="float32")
    with torch.no_grad():
        before = base(ids).logits
        after = PeftModel.from_pretrained(base, str(tmp_path / "copy"))(ids).logits
    assert not torch.equal(before, after)  # a trained adapter, not the identity


def test_the_adapter_manifest_names_each_row_its_command_seed_and_hash():
    """benchmarks/results/adapters.json: the adapters left git, their command, seed and SHA-256 stay; where a copy
    is on disk (benchmarks/results/adapters/<row>/, ignored) it is the one hashed."""
    import hashlib
    import subprocess

    manifest = json.loads((ROOT / "benchmarks" / "results" / "adapters.json").read_text())["adapters"]
    record = json.loads((ROOT / "benchmarks" / "results" / "effect.json").read_text())["methods"]
    assert {a["row"] for a in manifest} == {"grpo", "trl_grpo", "sage", "sage_no_planner",
                                            "comas_judge_1.0_lr5e-4_role"}
    for a in manifest:
        assert a["command"] == record[a["row"]]["per_seed"][str(a["seed"])]["command"], a["row"]
        assert len(a["adapter_model.safetensors sha256"]) == 64
        file = ROOT / "benchmarks" / "results" / "adapters" / a["row"] / "adapter_model.safetensors"
        if file.exists():
            assert hashlib.sha256(file.read_bytes()).hexdigest() == a["adapter_model.safetensors sha256"], a["row"]
    tracked = subprocess.run(["git", "ls-files", "benchmarks/results/adapters"], cwd=ROOT, capture_output=True,
                             text=True)
    assert tracked.returncode != 0 or tracked.stdout == ""  # no adapter under git (outside a git checkout: moot)


def test_evaluations_under_other_keys_get_their_own_folder_base_and_table_label():
    assert effect.eval_folder("base", []) == "base"
    assert effect.eval_folder("eval", ["model.dtype=float32"]) == "eval-model.dtype-float32"
    items = [{"correct": 1.0, "chars": 4}, {"correct": 0.0, "chars": 2}]
    fp32 = [*effect.EVAL, "model.dtype=float32"]
    other = effect.base_record(items[::-1], 2, effect.BENCH, fp32)
    rec = {"base": effect.base_record(items, 2), "bases": {other["command"]: other}}
    assert [b["correct"] for b in effect.recorded_base(rec, 2)] == [1.0, 0.0]
    assert [b["correct"] for b in effect.recorded_base(rec, 2, fp32)] == [0.0, 1.0]
    assert effect.recorded_base(rec, 2, [*effect.EVAL, "model.dtype=bfloat16"]) is None
    row = effect.row_summary(other, {"0": {"items": [1.0, 1.0], "diff": 0.5}})
    assert row["eval"] == other["command"]
    assert "| sage (eval model.dtype=float32) | 1 |" in effect.table({"sage": row})
    plain = effect.row_summary(rec["base"], {"0": {"items": [1.0, 1.0], "diff": 0.5}})
    assert "| grpo | 1 |" in effect.table({"grpo": plain})


def test_a_row_pairs_with_one_base_so_seeds_of_other_evaluations_do_not_merge():
    old = {"0": {"items": [1.0]}, "1": {"items": [0.0], "eval": "B"}}
    assert set(effect.merge_seeds("grpo", {"0": old["0"]}, {"2": {"items": [1.0], "eval": "A"}}, "A", "A")) == {"0", "2"}
    with pytest.raises(effect.UsageError, match="row sage: seeds 0 were evaluated with other keys than 'B'"):
        effect.merge_seeds("sage", old, {}, "B", "A")


def test_a_seed_that_would_not_pair_is_refused_before_any_evaluation_or_training(tmp_path, monkeypatch, capsys):
    """The twentieth session's trl_grpo seed 1: evaluated under --eval-set for 8 minutes, then refused at the merge."""
    plain = effect.eval_command(2)
    fp32 = effect.eval_command(2, effect.BENCH, [*effect.EVAL, "model.dtype=float32"])
    record = {"base": {"items": [1.0, 0.0], "answer_chars": 3.0, "command": plain},
              "methods": {"trl_grpo": {"per_seed": {"0": {"items": [1.0, 1.0]}}},  # before seeds carried "eval"
                          "sage": {"per_seed": {"0": {"items": [1.0, 1.0], "eval": fp32}}}}}
    (tmp_path / "effect.json").write_text(json.dumps(record))
    ran = []
    monkeypatch.setattr(effect, "RESULTS", tmp_path)
    monkeypatch.setattr(effect, "sh", ran.append)
    monkeypatch.setattr(effect, "train", lambda *a, **k: ran.append(a))

    def run(*argv):
        monkeypatch.setattr("sys.argv", ["effect.py", "--n", "2", "--out", str(tmp_path / "runs"), *argv])
        return effect.one_line(effect.main)

    assert run("--rows", "trl_grpo", "--seeds", "1", "--eval-set", "model.dtype=float32") == 2
    assert "row trl_grpo: seeds 0 were evaluated with other keys" in capsys.readouterr().err
    assert run("--rows", "sage", "--seeds", "1") == 2
    assert not ran and not (tmp_path / "runs").exists()
    # the seed with other keys is the one run again now: allowed (the new seed replaces it)
    effect.check_rows_pair(record, ["sage"], [0], plain)
    effect.check_rows_pair(record, ["sage"], [1, 2], fp32)
    effect.check_rows_pair(record, ["trl_grpo", "new_row"], [1], plain)


def test_eval_extra_is_what_an_evaluation_adds_to_the_defaults():
    assert effect.eval_extra(effect.base_record([{"correct": 1.0, "chars": 1}], 1)["command"]) == []
    fp32 = effect.base_record([{"correct": 1.0, "chars": 1}], 1, effect.BENCH, [*effect.EVAL, "model.dtype=float32"])
    assert effect.eval_extra(fp32["command"]) == ["model.dtype=float32"]


def test_missing_seeds_lists_the_lowest_unrecorded_seeds_with_the_rows_mean_time():
    methods = {"a": {"per_seed": {"0": {"train_s": 100.0}, "2": {"train_s": 300.0}}},
               "b": {"per_seed": {"0": {}, "1": {}, "2": {}}}, "c": {"diff": 0.0}}
    assert effect.missing_seeds(methods, ["a", "b", "c", "d"]) == [
        ("a", 1, 200.0), ("c", 0, None), ("c", 1, None), ("c", 2, None), ("d", 0, None), ("d", 1, None),
        ("d", 2, None)]
    assert effect.missing_seeds(methods, ["a"], want=1) == [] and effect.missing_seeds(methods, ["a"], 4) == [
        ("a", 1, 200.0), ("a", 3, 200.0)]


# ---- a row that continues another (sage_64: the sage command to 64 steps) ----------------------------------------
def _run_folder(where: Path, argv: list[str]) -> None:
    """A finished run folder as the loop leaves it: launch, checkpoint, step adapter, final adapter, evaluation."""
    for sub in ("checkpoint", "adapters/step_31/sage", "adapters/final/sage", "eval-model.dtype-float32"):
        (where / sub).mkdir(parents=True)
    (where / "run.json").write_text(json.dumps([{"argv": argv}]))
    (where / "checkpoint" / "state.json").write_text('{"step": 31, "config": {"trainer": {"max_steps": 32}}}')
    (where / "metrics.jsonl").write_text('{"step": 31}\n')
    (where / "adapters" / "final" / "sage" / "adapter_config.json").write_text("{}")


def _sage_argv(where: Path, seed: int, *extra: str) -> list[str]:
    return ["selfevo", "run", "sage", "--preset", "cpu-learn", *extra, f"seed={seed}", f"output_dir={where}"]


def test_a_continued_run_starts_as_a_copy_without_the_final_adapter_and_evaluations(tmp_path):
    source, where = tmp_path / "sage" / "seed1", tmp_path / "sage_64" / "seed1"
    _run_folder(source, _sage_argv(source, 1))
    assert effect.start_from(source, where)
    assert (where / "checkpoint" / "state.json").read_text() == (source / "checkpoint" / "state.json").read_text()
    assert (where / "adapters" / "step_31" / "sage").is_dir() and (where / "metrics.jsonl").exists()
    assert not (where / "adapters" / "final").exists() and not list(where.glob("eval*"))
    assert not effect.ROWS["sage_64"].finished(where) and effect.ROWS["sage"].finished(source)  # source untouched
    assert not where.with_name("seed1.partial").exists()
    assert not effect.start_from(source, where)  # an existing folder is never overwritten
    assert not effect.start_from(tmp_path / "nothing", tmp_path / "sage_64" / "seed2")  # no checkpoint: no copy
    assert not (tmp_path / "sage_64" / "seed2").exists()


def test_first_command_copies_only_a_run_of_the_continued_rows_command(tmp_path):
    row, extra = effect.ROWS["sage_64"], ("model.dtype=float32",)
    one = tmp_path / "sage" / "seed1"
    _run_folder(one, _sage_argv(one, 1, "model.dtype=float32"))
    cmd = effect.first_command(row, tmp_path, "sage_64", 1, extra)
    assert effect.shown(cmd).startswith("selfevo run sage --preset cpu-learn model.dtype=float32 seed=1")
    assert (tmp_path / "sage_64" / "seed1" / "checkpoint").is_dir()
    effect.check_same_command(tmp_path / "sage_64" / "seed1", cmd)  # the copy passes as this row's run
    two = tmp_path / "sage" / "seed2"
    _run_folder(two, _sage_argv(two, 2))  # trained without model.dtype=float32: another command, not copied
    cmd = effect.first_command(row, tmp_path, "sage_64", 2, extra)
    assert "trainer.max_steps=64" in cmd and not (tmp_path / "sage_64" / "seed2").exists()
    assert effect.first_command(effect.ROWS["sage"], tmp_path, "sage", 1, extra) == effect.ROWS["sage"].command(
        one, 1, extra)


def test_a_continued_row_is_its_sources_command_with_more_steps_at_a_constant_rate():
    """What makes a continued run the longer run: the same keys but ``trainer.max_steps``, no schedule that
    depends on the run's length, no warm-up."""
    from selfevo.algorithms import RECIPES
    from selfevo.config import load_config

    for name, row in effect.ROWS.items():
        if not row.continues:
            continue
        src = effect.ROWS[row.continues]
        assert (row.recipe, row.preset, row.adapter) == (src.recipe, src.preset, src.adapter)
        schema = RECIPES.get(row.recipe).config_class()
        long, short = (load_config(schema, r.recipe, r.preset, r.overrides) for r in (row, src))
        assert long.trainer.max_steps > short.trainer.max_steps
        assert long.trainer.lr_schedule == "constant" and long.trainer.warmup_steps == 0
        long.trainer.max_steps = short.trainer.max_steps
        assert long == short, name


def test_todo_says_how_much_of_a_run_is_on_disk(tmp_path):
    methods = {"sage": {"per_seed": {"1": {"train_s": 3600.0}}}}
    source = tmp_path / "sage" / "seed1"
    assert effect.todo_line("sage_64", 1, 9000.0, methods, tmp_path) == "sage_64:1  ~150 min training"
    _run_folder(source, _sage_argv(source, 1))
    assert effect.todo_line("sage_64", 1, 9000.0, methods, tmp_path) == (
        f"sage_64:1  ~150 min training, ~60 of them done: it continues {source}")
    assert effect.todo_line("sage_64", 2, None, methods, tmp_path) == "sage_64:2  (no recorded run)"
    assert effect.todo_line("azr", 1, 60.0, methods, tmp_path) == "azr:1  ~1 min training"
    stopped = tmp_path / "azr" / "seed1" / "checkpoint"  # a run stopped after 5 of its 32 steps
    stopped.mkdir(parents=True)
    (stopped / "state.json").write_text(json.dumps({"step": 4, "config": {"trainer": {"max_steps": 32}}}))
    assert effect.todo_line("azr", 1, 60.0, methods, tmp_path) == (
        f"azr:1  ~1 min training, 5 of 32 steps on disk: it resumes {stopped.parent}")
    (stopped / "state.json").write_text(json.dumps({"step": 31, "config": {"trainer": {"max_steps": 32}}}))
    (stopped.parent / "adapters" / "final" / "azr").mkdir(parents=True)  # trained: its final adapter is saved
    (stopped.parent / "adapters" / "final" / "azr" / "adapter_config.json").write_text("{}")
    assert effect.todo_line("azr", 1, 60.0, methods, tmp_path) == (
        f"azr:1  ~1 min training, trained (32 of 32 steps on disk): only its evaluation is left, in {stopped.parent}")
    _run_folder(tmp_path / "sage_64" / "seed1", _sage_argv(tmp_path / "sage_64" / "seed1", 1))  # own folder first
    assert effect.todo_line("sage_64", 1, 9000.0, methods, tmp_path) == (
        f"sage_64:1  ~150 min training, trained (32 of 32 steps on disk): only its evaluation is left, in "
        f"{tmp_path / 'sage_64' / 'seed1'}")


def test_todo_counts_the_steps_of_a_stopped_trl_run(tmp_path):
    where = tmp_path / "trl_grpo" / "seed1"
    assert effect.todo_line("trl_grpo", 1, 5760.0, {}, tmp_path) == "trl_grpo:1  ~96 min training"
    for step in (5, 6):  # TRL's Trainer saved checkpoint-6 whole; checkpoint-7 lacks trainer_state.json (written last)
        (where / "trainer" / f"checkpoint-{step}").mkdir(parents=True)
        (where / "trainer" / f"checkpoint-{step}" / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "max_steps": 24}))
    (where / "trainer" / "checkpoint-7").mkdir()
    assert effect.todo_line("trl_grpo", 1, 5760.0, {}, tmp_path) == (
        f"trl_grpo:1  ~96 min training, 6 of 24 steps on disk: it resumes {where}")
    (where / "adapter").mkdir()
    (where / "adapter" / "adapter_config.json").write_text("{}")
    assert effect.todo_line("trl_grpo", 1, 5760.0, {}, tmp_path) == (
        f"trl_grpo:1  ~96 min training, trained (6 of 24 steps on disk): only its evaluation is left, in {where}")


def test_two_runs_of_one_row_that_overlap_keep_both_seeds(tmp_path, monkeypatch):
    """The twenty-third session's comas seed 0: seed 1's run started before seed 0 merged and, writing last, wrote
    the row as it had loaded it (without seed 0). Here seed 1's whole run happens while seed 0 trains."""
    command = effect.eval_command(2)
    base = {"items": [0.0, 1.0], "answer_chars": 3.0, "command": command}
    sage = effect.row_summary(base, {"2": {"items": [1.0, 1.0], "diff": 0.5, "eval": command}})
    (tmp_path / "effect.json").write_text(json.dumps({"base": base, "methods": {"sage": sage}}))
    monkeypatch.setattr(effect, "RESULTS", tmp_path)
    monkeypatch.setattr(effect, "maestro_row", lambda: None)
    items = {0: [1.0, 1.0], 1: [0.0, 0.0]}

    def run(seed):
        monkeypatch.setattr("sys.argv", ["effect.py", "--n", "2", "--out", str(tmp_path / "runs"), "--rows", "comas",
                                         "--seeds", str(seed)])
        assert effect.one_line(effect.main) == 0

    def train(row, where, seed, run_it, extra=()):
        if seed == 0:
            run(1)  # the other process: loads effect.json after this one, trains, merges and ends first
        return f"train {seed}"

    def after_record(row, where, n, base, cmd, *rest):
        seed = int(cmd.split()[-1])
        return effect.seed_record(base, [{"correct": c, "chars": 4} for c in items[seed]], cmd, [])

    monkeypatch.setattr(effect, "train", train)
    monkeypatch.setattr(effect, "after_record", after_record)
    run(0)
    written = json.loads((tmp_path / "effect.json").read_text())
    row = written["methods"]["comas"]
    assert sorted(row["per_seed"]) == ["0", "1"] and row["seeds"] == [0, 1]
    assert row["per_seed"]["0"]["items"] == [1.0, 1.0] and row["per_seed"]["1"]["items"] == [0.0, 0.0]
    # rebuilt over both seeds: seed-averaged items [0.5, 0.5] against the base [0, 1]
    assert row["after"] == pytest.approx(0.5) and row["diff"] == pytest.approx(0.0)
    assert [row["over_seeds"]["k"], row["over_seeds"]["mean"]] == [2, pytest.approx(0.0)]
    assert sorted(written["methods"]) == ["comas", "sage"]  # a row neither run touched is kept as it was
    assert written["methods"]["sage"] == json.loads(json.dumps(sage))
    # a rerun of seed 1 replaces that seed and keeps seed 0
    items[1] = [1.0, 0.0]
    monkeypatch.setattr(effect, "train", lambda row, where, seed, run_it, extra=(): f"train {seed}")
    run(1)
    row = json.loads((tmp_path / "effect.json").read_text())["methods"]["comas"]
    assert sorted(row["per_seed"]) == ["0", "1"] and row["per_seed"]["1"]["items"] == [1.0, 0.0]
    assert row["after"] == pytest.approx(0.75)


def test_an_evaluation_records_the_digest_of_its_answers_and_a_base_read_back_keeps_it(tmp_path):
    (tmp_path / "items.jsonl").write_text('{"correct": true, "final_response": "a"}\n'
                                          '{"correct": false, "final_response": "b"}\n')
    items = effect._records(tmp_path / "items.jsonl", 2)
    digest = "3a6b2ca2823a2ec34a3e43b2bc7d2212b05a295c87d1a356e1d572f7d759f86a"  # printf 'a\n\0b' | sha256sum
    assert effect.answers_sha256(items) == {"answers_sha256": digest}
    assert effect.base_record(items, 2)["answers_sha256"] == digest
    assert effect.seed_record(items, items, "train", [])["answers_sha256"] == digest
    assert effect.answers_sha256([]) == {} and effect.answers_sha256([{"correct": 1.0, "chars": 1}]) == {}
    # a base read back from effect.json has verdicts and the mean length, not the texts: the recorded digest stays
    record = {"base": effect.base_record(items, 2), "methods": {}}
    read_back = effect.base_record(effect.recorded_base(record, 2), 2)
    assert "answers_sha256" not in read_back
    effect.merge_record(record, read_back, False, {}, None)
    assert record["base"]["answers_sha256"] == digest
    other = {**read_back, "command": effect.eval_command(3)}  # another evaluation does not inherit it
    effect.merge_record(record, other, False, {}, None)
    assert "answers_sha256" not in record["base"]
    effect.merge_record(record, effect.base_record(items, 2, effect.BENCH, [*effect.EVAL, "x=1"]), True, {}, None)
    assert record["bases"][effect.eval_command(2, effect.BENCH, [*effect.EVAL, "x=1"])]["answers_sha256"] == digest


def test_table_only_adds_the_missing_spread_to_the_file_once_and_rebuilds_the_table(tmp_path, monkeypatch):
    seeds = {str(i): {"items": [1.0, 0.0, 1.0, 0.0], "diff": d} for i, d in enumerate((0.1, 0.2, 0.3))}
    r = effect.row_summary(BASE, seeds)
    old = {k: v for k, v in r.items() if k != "over_seeds"}  # merged by a copy of the script before the key existed
    (tmp_path / "effect.json").write_text(json.dumps({"methods": {"old": old}}) + "\n")
    monkeypatch.setattr(effect, "RESULTS", tmp_path)
    monkeypatch.setattr("sys.argv", ["effect.py", "--table-only"])
    assert effect.one_line(effect.main) == 0
    written = (tmp_path / "effect.json").read_text()
    assert json.loads(written)["methods"]["old"]["over_seeds"] == json.loads(json.dumps(r["over_seeds"]))
    assert "| +0.100, +0.200, +0.300 | [-0.048, +0.448] |" in (tmp_path / "effect.md").read_text()
    assert effect.one_line(effect.main) == 0 and (tmp_path / "effect.json").read_text() == written
