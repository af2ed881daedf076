"""``selfevo sweep`` (selfevo.sweep): the sweep file checked key by key before anything runs (one-line errors, exit
2), what a run folder says is left to do, the table rebuilt from folders against numbers worked out by hand, the
submitit launcher through its local executor, and benchmarks/sweeps/smoke.yaml end to end: killed with -9 in the
middle, run again to the end, and ``--table`` rebuilding the same files byte for byte."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.paths import ROOT
from selfevo import cli
from selfevo.loop import checkpoint
from selfevo.sweep import launch, spec, table
from selfevo.sweep.spec import Job

SMOKE = ROOT / "benchmarks" / "sweeps" / "smoke.yaml"


def _sweep_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"output_dir: {tmp_path / 'out'}\n" + text)
    return path


GOOD = """seeds: [0]
baseline: base
eval: {benchmark: arith, limit: 2}
rows:
  base: {}
"""


@pytest.mark.parametrize("text,message", [
    (GOOD.replace("seeds:", "seed:"), "unknown config key 'seed' in {f}; did you mean 'seeds'?"),
    (GOOD.replace("limit: 2", "limt: 2"), "unknown config key 'eval.limt' in {f}; did you mean 'eval.limit'?"),
    (GOOD.replace("base: {}", "base: {overides: [a=1]}"),
     "unknown config key 'overides' in {f}, row 'base'; did you mean 'overrides'?"),
    (GOOD.replace("base: {}", "base: {recipe: grop}"), "did you mean 'grpo'?"),
    (GOOD.replace("baseline: base", "baseline: bse"), "baseline 'bse' is not a row of {f} (did you mean 'base'?)"),
    (GOOD.replace("arith", "arihm"), "did you mean 'arith'?"),
    (GOOD + "contrasts: [base - bse]\n", "contrast 'base - bse' in {f}: 'bse' is not a row of it (did you mean 'base'?)"),
    (GOOD + "contrasts: [base-base]\n", "contrast 'base-base' in {f} must be two rows as 'a - b'"),
    (GOOD + "contrasts: [base - base]\n", "contrast 'base - base' in {f} compares a row with itself"),
    (GOOD.replace("limit: 2", "limit: 0"), "eval.limit must be >= 1, got 0"),
    (GOOD.replace("base: {}", "base: {seeds: [x]}"), "seeds"),
    (GOOD.replace("base: {}", "base/x: {}"), "row name 'base/x'"),
    (GOOD.replace("rows:\n  base: {}\n", "rows: {}\n").replace("baseline: base", "baseline: null"), "names no rows"),
])
def test_sweep_file_errors_are_one_line(tmp_path, capsys, text, message):
    path = _sweep_file(tmp_path, text)
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("selfevo: ") and message.format(f=path) in err
    assert not (tmp_path / "out").exists()


def test_every_run_config_is_checked_before_anything_runs(tmp_path, capsys):
    rows = GOOD + "  grpo: {recipe: grpo, overrides: [trainer.max_step=2]}\n"
    assert cli.main(["sweep", str(_sweep_file(tmp_path, rows))]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'trainer.max_step'" in err and "did you mean 'trainer.max_steps'?" in err
    rows = GOOD + "  grpo: {recipe: grpo, eval_set: [rouns=2]}\n"  # an eval key no setup has
    assert cli.main(["sweep", str(_sweep_file(tmp_path, rows))]) == 2
    assert "unknown key 'rouns'" in capsys.readouterr().err
    assert cli.main(["sweep", str(_sweep_file(tmp_path, GOOD)), "--only", "bas"]) == 2
    assert "--only: no row 'bas' (did you mean 'base'?)" in capsys.readouterr().err
    assert cli.main(["sweep", str(_sweep_file(tmp_path, GOOD)), "--jobs", "4096"]) == 2
    assert "--jobs 4096 is more than the" in capsys.readouterr().err
    assert cli.main(["sweep", str(tmp_path / "none.yaml")]) == 2
    assert "no sweep file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_plan_builds_the_run_and_eval_commands(tmp_path):
    cfg, rows = spec.load_sweep(SMOKE)
    cfg.output_dir = str(tmp_path / "out")
    jobs = spec.plan(cfg, rows, ["base", "grpo"], seeds=[3])
    assert [(j.row, j.seed) for j in jobs] == [("base", 3), ("grpo", 3)]
    base, grpo = jobs
    where = tmp_path / "out" / "grpo" / "seed3"
    assert base.train == () and base.eval[:3] == ("eval", "benchmark=arith", "setup=vanilla")
    assert "sampling.temperature=0.0" in base.eval and "model.backbones=[tiny-random]" in base.eval
    assert base.eval[-1] == f"output_dir={tmp_path / 'out' / 'base' / 'seed3' / 'eval'}" and "seed=3" in base.eval
    assert grpo.train[:2] == ("run", "grpo") and grpo.train[-2:] == ("seed=3", f"output_dir={where}")
    assert grpo.max_steps == 2 and f"adapters=[{where / 'adapters/final/agent0'}]" in grpo.eval
    assert [c[3] for c in grpo.commands()] == ["run", "eval"]  # nothing there yet: train, then evaluate


def _finished_run(where: Path, step: int, final: bool) -> None:
    (where / "checkpoint").mkdir(parents=True)
    (where / "checkpoint" / "state.json").write_text(json.dumps({"step": step}))
    if final:
        (where / "adapters" / "final" / "agent0").mkdir(parents=True)
        (where / "adapters" / "final" / "agent0" / "adapter_config.json").write_text("{}")


def test_what_a_run_folder_leaves_to_do(tmp_path):
    job = Job("g", 0, tmp_path / "g", ("run", "grpo", "seed=0"), ("eval", "x=1"), max_steps=3,
              adapter="adapters/final/agent0")
    _finished_run(job.dir, 1, final=False)  # killed after step 1 of 3: resume
    assert [c[3:] for c in job.commands()] == [["run", "grpo", "seed=0", "resume=true"], ["eval", "x=1"]]
    (job.dir / "checkpoint" / "state.json").write_text(json.dumps({"step": 2}))  # killed before the final export
    assert job.commands()[0][-1] == "resume=true"
    (job.dir / "adapters" / "final" / "agent0").mkdir(parents=True)
    (job.dir / "adapters" / "final" / "agent0" / "adapter_config.json").write_text("{}")
    assert [c[3:] for c in job.commands()] == [["eval", "x=1"]]  # trained: only the evaluation is left
    (job.dir / "eval").mkdir()
    (job.dir / "eval" / "summary.json").write_text("[]")
    assert job.commands() == []
    fresh = Job("g", 1, tmp_path / "h", ("run", "grpo"), ("eval",), max_steps=3, adapter="adapters/final/agent0")
    assert fresh.commands()[0][-1] == "grpo"  # no checkpoint: a fresh run, not resume=true


def test_a_changed_sweep_file_does_not_reuse_a_run(tmp_path):
    where = tmp_path / "run"
    where.mkdir()
    OmegaConf.save(OmegaConf.create({"seed": 0, "trainer": {"lr": 0.1}, "resume": False}), where / "config.yaml")
    spec.check_same_run(where, OmegaConf.create({"seed": 0, "trainer": {"lr": 0.1}, "resume": True}))
    with pytest.raises(spec.ConfigError, match="trained with trainer.lr=0.1, the sweep file now says 0.2"):
        spec.check_same_run(where, OmegaConf.create({"seed": 0, "trainer": {"lr": 0.2}, "resume": False}))


def test_a_run_trained_with_dtype_auto_is_the_run_pinning_the_dtype_auto_resolved_to(tmp_path):
    """model.dtype=auto resolves per machine (run.json records it at each launch): a file that now pins float32
    reuses an `auto` run that trained in float32 on every launch, and no other."""
    where = tmp_path / "run"
    where.mkdir()
    (where / "config.yaml").write_text("seed: 0\nmodel:\n  dtype: auto\n")
    pinned = OmegaConf.create({"seed": 0, "model": {"dtype": "float32"}})
    with pytest.raises(spec.ConfigError, match="trained with model.dtype=auto, the sweep file now says float32"):
        spec.check_same_run(where, pinned)  # no run.json: what auto resolved to is unknown
    (where / "run.json").write_text(json.dumps([{"dtype": "float32"}, {"dtype": "float32"}]))
    spec.check_same_run(where, pinned)
    spec.check_same_run(where, OmegaConf.create({"seed": 0, "model": {"dtype": "auto"}}))
    with pytest.raises(spec.ConfigError, match="trained with model.dtype=auto, the sweep file now says bfloat16"):
        spec.check_same_run(where, OmegaConf.create({"seed": 0, "model": {"dtype": "bfloat16"}}))
    (where / "run.json").write_text(json.dumps([{"dtype": "float32"}, {"dtype": "bfloat16"}]))  # resumed elsewhere
    with pytest.raises(spec.ConfigError, match="now says float32"):
        spec.check_same_run(where, pinned)


def test_a_run_from_before_a_key_was_renamed_is_the_same_run(tmp_path):
    """config.yaml written with the old key (agents, renamed n_agents) matches a config that says n_agents."""
    where = tmp_path / "run"
    where.mkdir()
    (where / "config.yaml").write_text("seed: 0\nagents: 2\n")
    spec.check_same_run(where, OmegaConf.create({"seed": 0, "n_agents": 2}))
    with pytest.raises(spec.ConfigError, match="says 3"):
        spec.check_same_run(where, OmegaConf.create({"seed": 0, "n_agents": 3}))


def test_a_key_split_into_several_sections_gives_each_its_old_value(tmp_path, monkeypatch):
    from selfevo import config

    monkeypatch.setitem(config.RENAMED, "engine.eager", ("engine.a.eager", "engine.b.eager"))
    where = tmp_path / "run"
    where.mkdir()
    (where / "config.yaml").write_text("engine:\n  eager: true\n")
    spec.check_same_run(where, OmegaConf.create({"engine": {"a": {"eager": True}, "b": {"eager": True}}}))
    with pytest.raises(spec.ConfigError, match="engine.b.eager=True, the sweep file now says False"):
        spec.check_same_run(where, OmegaConf.create({"engine": {"a": {"eager": True}, "b": {"eager": False}}}))


def _fake_eval(folder: Path, correct: list[int], answers: list[str] | None = None) -> None:
    items = folder / "eval" / "arith-vanilla"
    items.mkdir(parents=True)
    answers = answers or ["ab"] * len(correct)
    items.joinpath("items.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "correct": bool(c), "final_response": a}) + "\n"
        for i, (c, a) in enumerate(zip(correct, answers))))
    (folder / "eval" / "summary.json").write_text(json.dumps([{"benchmark": "arith", "setup": "vanilla",
                                                               "split": "test", "sampling": {"temperature": 0.0,
                                                                                             "max_new_tokens": 8}}]))


def test_table_from_folders_by_hand(tmp_path):
    cfg = OmegaConf.create({"output_dir": str(tmp_path), "baseline": "base"})
    rows = {name: OmegaConf.create({"about": "", "recipe": None if name == "base" else "grpo",
                                    "curve": ["r"] if name == "g" else []}) for name in ("base", "g")}
    _fake_eval(tmp_path / "base" / "seed0", [0, 0, 1, 0], ["", "1", "22", "333"])
    _fake_eval(tmp_path / "g" / "seed0", [1, 0, 1, 0])
    _fake_eval(tmp_path / "g" / "seed1", [1, 1, 1, 0])
    for seed, rewards in ((0, [0.0, 0.5]), (1, [0.5, 1.0])):
        (tmp_path / "g" / f"seed{seed}" / "metrics.jsonl").write_text("".join(
            json.dumps({"step": i, "r": r, "step_s": 1.5}) + "\n" for i, r in enumerate(rewards)))
    (tmp_path / "g" / "seed2").mkdir()  # a seed not evaluated yet: not in the table
    md = table.write(cfg, rows)
    got = json.loads((tmp_path / "table.json").read_text())
    g = got["rows"]["g"]
    # test_row_summary_by_hand's numbers: seed-avg [1, .5, 1, 0] against [0, 0, 1, 0]
    assert g["seeds"] == [0, 1] and g["accuracy"] == 0.625 and g["paired"]["diff"] == 0.375
    assert g["per_seed"]["1"]["diff"] == 0.5 and g["train_s"] == 3.0 and g["answer_chars"] == 2.0
    assert got["rows"]["base"]["answer_chars"] == 1.5 and got["rows"]["base"]["paired"] is None
    assert got["item_ids"] == ["q0", "q1", "q2", "q3"] and got["baseline"] == "base"
    lines = md.splitlines()
    assert lines[0] == "arith (test), 4 items, temperature 0.0, max 8 new tokens; paired against: base"
    assert lines[4] == ("| base | vanilla | 1 | 0.250 [0.046, 0.699] | baseline | – | 0.250 | – | 1.5 | – |")
    assert lines[5].startswith("| g | vanilla | 2 | 0.625 [0.150, 0.850] | +0.375 [-0.094, +0.844] | +2/−0 | "
                               "0.500 (+0.250), 0.750 (+0.500) | +0.375 [-1.213, +1.963] | 2.0 | 3.0 |")
    assert (tmp_path / "curves.png").exists()
    assert table.curves(cfg, rows)["g"]["r"][:2] == [[0, 1], [0.25, 0.75]]
    _fake_eval(tmp_path / "g" / "seed3", [1, 0, 1])  # another limit: a one-line error, not a wrong pairing
    with pytest.raises(spec.ConfigError, match="holds other items"):
        table.write(cfg, rows)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_slurm_launcher_through_submitits_local_executor(tmp_path, capsys):
    pytest.importorskip("submitit")
    ok = Job("a", 0, tmp_path / "a" / "seed0", eval=("--help",))
    bad = Job("b", 0, tmp_path / "b" / "seed0", eval=("frobnicate",))
    failed = launch.run_submitit([ok, bad], tmp_path / "_submitit", {"timeout_min": 5}, cluster="local")
    assert list(failed) == [bad] and "exited with 2" in failed[bad]
    assert "selfevo sweep FILE.yaml" in launch.log_path(ok).read_text()
    assert "unknown command 'frobnicate'" in launch.log_path(bad).read_text()


def test_slurm_without_submitit_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit → ImportError
    assert cli.main(["sweep", str(_sweep_file(tmp_path, GOOD)), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'selfevo[slurm]'" in err


def test_threads_per_job_never_oversubscribe(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's budget, not the machine's cores
    assert launch.budget() == 3 and launch.thread_env(3)["OMP_NUM_THREADS"] == "1"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert launch.budget() == launch.cores()
    assert launch.thread_env(1, total=16)["OMP_NUM_THREADS"] == "16"
    assert launch.thread_env(3, total=16)["OMP_NUM_THREADS"] == "5"
    with pytest.raises(spec.ConfigError):
        launch.thread_env(3, total=2)


def _outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("table.md", "table.json", "curves.png")}


@pytest.mark.slow
def test_smoke_sweep_survives_kill_9_and_rebuilds_its_table(tmp_path):
    sweep = tmp_path / "smoke.yaml"
    sweep.write_text(SMOKE.read_text().replace("output_dir: runs/sweeps/smoke", f"output_dir: {tmp_path / 'out'}"))
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "selfevo", "sweep", str(sweep)]
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not checkpoint.exists(out / "grpo" / "seed0") and first.poll() is None:
        assert time.time() < deadline, "the first checkpoint never came"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the sweep and the runs it started, as a killed job loses them
    first.wait()
    assert not (out / "table.md").exists()
    killed_at = json.loads(checkpoint.read_file(out / "grpo" / "seed0", "state.json"))["step"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (out / "grpo" / "seed0.log").read_text()
    # the killed run went on from its checkpoint (unless the kill came after its last step: then it is evaluated)
    assert ("resume=true" in log) == (killed_at < 1), (killed_at, log[-2000:])
    assert "1 runs, 0 with work left" not in done.stdout and "with work left" in done.stdout
    got = json.loads((out / "table.json").read_text())
    assert list(got["rows"]) == ["base", "grpo"] and got["n"] == 4
    assert all(r["seeds"] == [0, 1] for r in got["rows"].values())
    assert got["rows"]["grpo"]["per_seed"]["0"]["steps"] == 2
    before = _outputs(out)
    again = subprocess.run([*cmd, "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "4 runs, 0 with work left" in again.stdout
    assert cli.main(["sweep", str(sweep), "--table"]) == 0
    assert _outputs(out) == before


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_maestro_rows_evaluate_a_central_agent(tmp_path, capsys):
    rows = GOOD + """  clpo:
    recipe: maestro
    overrides: ["model.backbones=[tiny-random]"]
    adapter: adapters/final/central
    adapter_key: central_adapter
    setup: maestro_select
    eval_set: [n_agents=2, k=1]
  prompt_only: {setup: maestro_select, eval_set: [n_agents=2, k=1]}
"""
    cfg, rows_cfg = spec.load_sweep(_sweep_file(tmp_path, rows))
    _, clpo, prompt_only = spec.plan(cfg, rows_cfg, ["base", "clpo", "prompt_only"])
    where = tmp_path / "out" / "clpo" / "seed0"
    assert "setup=maestro_select" in clpo.eval and f"central_adapter={where / 'adapters/final/central'}" in clpo.eval
    assert "n_agents=2" in clpo.eval and clpo.adapter == "adapters/final/central"
    assert prompt_only.train == () and "setup=maestro_select" in prompt_only.eval
    wrong = rows.replace("    setup: maestro_select\n", "")  # a central agent needs the maestro_select setup
    assert cli.main(["sweep", str(_sweep_file(tmp_path, wrong)), "--dry-run"]) == 2
    assert "unknown key 'n_agents'" in capsys.readouterr().err  # vanilla has no n_agents: caught first
    wrong = wrong.replace("    eval_set: [n_agents=2, k=1]\n  prompt_only", "  prompt_only")
    assert cli.main(["sweep", str(_sweep_file(tmp_path, wrong)), "--dry-run"]) == 2
    assert "central agent of setup=maestro_select" in capsys.readouterr().err


def test_a_changed_eval_section_does_not_reuse_an_evaluation(tmp_path):
    cfg, rows = spec.load_sweep(_sweep_file(tmp_path, GOOD))
    folder = tmp_path / "out" / "base" / "seed0" / "eval"
    folder.mkdir(parents=True)
    record = {"benchmark": "arith", "split": "test", "setup": "vanilla", "n": 2, "seed": 0,
              "sampling": {"max_new_tokens": 256, "temperature": 0.0, "top_p": 1.0}}
    (folder / "summary.json").write_text(json.dumps([record]))
    (job,) = spec.plan(cfg, rows, ["base"])  # the same evaluation: reused
    assert job.commands() == []
    record["sampling"]["temperature"] = 0.7
    (folder / "summary.json").write_text(json.dumps([record]))
    with pytest.raises(spec.ConfigError, match="evaluated with sampling.temperature=0.7, the sweep file now says 0.0"):
        spec.plan(cfg, rows, ["base"])
    record["sampling"]["temperature"], record["n"] = 0.0, 3
    (folder / "summary.json").write_text(json.dumps([record]))
    with pytest.raises(spec.ConfigError, match="evaluated with n=3, the sweep file now says 2"):
        spec.plan(cfg, rows, ["base"])


def test_a_row_pairs_with_its_own_baseline_where_it_names_one(tmp_path, capsys):
    """base2's items [1, 1, 1, 0]: g's seed-avg [1, .5, 1, 0] − base2 = [0, −.5, 0, 0], mean −0.125."""
    cfg = OmegaConf.create({"output_dir": str(tmp_path), "baseline": "base"})
    rows = {"base": OmegaConf.create({"about": "", "recipe": None, "curve": []}),
            "base2": OmegaConf.create({"about": "", "recipe": None, "curve": []}),
            "g": OmegaConf.create({"about": "", "recipe": "grpo", "baseline": "base2", "curve": []})}
    _fake_eval(tmp_path / "base" / "seed0", [0, 0, 1, 0])
    _fake_eval(tmp_path / "base2" / "seed0", [1, 1, 1, 0])
    _fake_eval(tmp_path / "g" / "seed0", [1, 0, 1, 0])
    _fake_eval(tmp_path / "g" / "seed1", [1, 1, 1, 0])
    md = table.write(cfg, rows)
    got = json.loads((tmp_path / "table.json").read_text())["rows"]
    assert got["g"]["baseline"] == "base2" and got["g"]["paired"]["diff"] == -0.125
    assert (got["g"]["paired"]["improved"], got["g"]["paired"]["worsened"]) == (0, 1)
    assert got["base2"]["baseline"] == "base" and got["base2"]["paired"]["diff"] == 0.5
    assert got["base"]["baseline"] is None and got["base"]["paired"] is None
    assert "| -0.125 [-0.370, +0.120] vs base2 | +0/−1 |" in md
    text = GOOD + "  g: {recipe: grpo, baseline: bas2}\n"
    assert cli.main(["sweep", str(_sweep_file(tmp_path, text)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 'g'" in err and "baseline 'bas2' is not a row (did you mean 'base'?)" in err



def test_contrasts_pair_two_rows_on_the_same_items(tmp_path):
    """g − base2 (test_a_row_pairs_with_its_own_baseline_where_it_names_one's folders): items −0.125 [−0.370,
    +0.120]; the seeds both rows ran: seed 0 only, 0.5 − 0.75; a contrast with a row not evaluated yet is left out."""
    cfg = OmegaConf.create({"output_dir": str(tmp_path), "baseline": "base",
                            "contrasts": ["g - base2", "g - later"]})
    rows = {name: OmegaConf.create({"about": "", "recipe": None, "curve": []})
            for name in ("base", "base2", "g", "later")}
    _fake_eval(tmp_path / "base" / "seed0", [0, 0, 1, 0])
    _fake_eval(tmp_path / "base2" / "seed0", [1, 1, 1, 0])
    _fake_eval(tmp_path / "g" / "seed0", [1, 0, 1, 0])
    _fake_eval(tmp_path / "g" / "seed1", [1, 1, 1, 0])
    md = table.write(cfg, rows)
    (got,) = json.loads((tmp_path / "table.json").read_text())["contrasts"]
    assert (got["a"], got["b"], got["seeds"]) == ("g", "base2", {"g": [0, 1], "base2": [0]})
    assert got["paired"]["diff"] == -0.125 and got["per_seed"] == {"0": -0.25} and got["over_seeds"]["k"] == 1
    assert md.splitlines()[-1] == "| g − base2 | 2 / 1 | -0.125 [-0.370, +0.120] | +0/−1 | -0.250 | – |"


def test_table_json_keeps_lists_of_values_on_one_line():
    t = {"ids": ["a/1", "b[2"], "rows": {"x": {"items": [1.0, 0.0], "ci": [0.1, 0.2], "d": [{"k": 1}]}}, "e": []}
    text = table.dumps(t)
    assert json.loads(text) == t and '"items": [1.0, 0.0],' in text and '"ci": [0.1, 0.2],' in text
    assert '"ids": [\n  "a/1",\n  "b[2"\n ],' in text  # a bracket inside a value: left as json.dumps wrote it
    assert '"d": [\n    {' in text and '"e": []' in text


def _carried(folder: Path, correct: list[int], **carried) -> None:
    _fake_eval(folder, correct)
    items = folder / "eval" / "arith-vanilla" / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "correct": bool(c)}) + "\n" for i, c in enumerate(correct)))
    record = json.loads((folder / "eval" / "summary.json").read_text())
    record[0]["carried_over"] = carried
    (folder / "eval" / "summary.json").write_text(json.dumps(record))


def test_the_table_gives_a_launch_as_the_command_a_user_types():
    """run.json keeps argv as launched; the table writes it as a command: the CLI by name, a row's own ``python -m``
    module by its dotted name (``python -m`` records the module's file), ``resume=true`` dropped."""
    cli = {"argv": ["/x/.venv/bin/selfevo", "run", "grpo", "seed=1", "resume=true"], "cwd": "/x"}
    assert table.command_of(cli) == "selfevo run grpo seed=1"
    module = {"argv": ["/x/benchmarks/sweeps/trl_grpo.py", "--preset", "cpu-learn", "seed=2"], "cwd": "/x"}
    assert table.command_of(module) == "python -m benchmarks.sweeps.trl_grpo --preset cpu-learn seed=2"
    elsewhere = {"argv": ["/y/tool.py", "seed=0"], "cwd": "/x"}  # not under the launch's folder: its path
    assert table.command_of(elsewhere) == "python /y/tool.py seed=0"
    assert table.command_of({"argv": []}) is None


def test_a_carried_over_evaluation_is_in_the_table_but_not_taken_for_the_sweeps_own(tmp_path):
    """Verdicts recorded elsewhere (benchmarks/sweeps/convert_effect.py): the table reads them with the recorded
    answer length, steps and training seconds; running the sweep trains and evaluates the row again."""
    cfg = OmegaConf.create({"output_dir": str(tmp_path), "baseline": "base"})
    rows = {"base": OmegaConf.create({"about": "", "recipe": None}),
            "g": OmegaConf.create({"about": "", "recipe": "grpo"})}
    _carried(tmp_path / "base" / "seed0", [0, 0, 1, 0], answer_chars=431.4)
    _carried(tmp_path / "g" / "seed0", [1, 0, 1, 0], answer_chars=57.7, answers_sha256="ab" * 32, steps=24,
             train_s=2744.2, command="selfevo run grpo seed=0")
    got = table.collect(cfg, rows)["rows"]
    assert got["g"]["paired"]["diff"] == 0.25 and got["g"]["train_s"] == 2744.2 and got["g"]["answer_chars"] == 57.7
    assert got["g"]["per_seed"]["0"]["steps"] == 24 and got["g"]["per_seed"]["0"]["answers_sha256"] == "ab" * 32
    assert got["base"]["answer_chars"] == 431.4 and got["base"]["train_s"] is None
    base = Job("base", 0, tmp_path / "base" / "seed0", eval=("eval", "x=1"))
    g = Job("g", 0, tmp_path / "g" / "seed0", ("run", "grpo", "seed=0"), ("eval", "x=1"), max_steps=2,
            adapter="adapters/final/agent0")
    assert not base.evaluated() and [c[3:] for c in base.commands()] == [["eval", "x=1"]]
    assert [c[3] for c in g.commands()] == ["run", "eval"]  # a fresh run, then its own evaluation replaces it
    from selfevo.sweep import status

    assert status(base) == "to evaluate (its carried-over evaluation is replaced)"
    assert "mixed" not in got["g"]
    _fake_eval(tmp_path / "g" / "seed1", [1, 1, 1, 0])  # seeds rerun one by one: the row says it mixes both
    md = table.markdown(mixed := table.collect(cfg, rows))
    assert mixed["rows"]["g"]["mixed"] == {"carried_over": [0], "rerun": [1]}
    assert "| g (mixes carried-over seeds [0] with rerun [1]) | vanilla | 2 |" in md
    run = tmp_path / "g" / "seed0"  # seed 0 being rerun: its new run's record waits for its own evaluation
    (run / "run.json").write_text(json.dumps([{"argv": ["selfevo", "run", "grpo", "seed=0", "x=1"]}]))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "step_s": 9.0, "reward": 0.5}) + "\n")
    assert table.collect(cfg, rows) == mixed
    assert "g" not in table.curves(cfg, {"g": OmegaConf.create({"curve": ["reward"]})})


EFFECT = ROOT / "benchmarks" / "results" / "effect.json"
EFFECT_SWEEP = ROOT / "benchmarks" / "sweeps" / "effect.yaml"


def _effect_sweep():
    cfg, rows = spec.load_sweep(EFFECT_SWEEP)
    cfg.output_dir = str(ROOT / cfg.output_dir)
    return cfg, rows


RAN_BEFORE_RUN_JSON = {("trl_grpo", "0")}  # rerun before benchmarks/sweeps/trl_grpo.py wrote run.json


def _rerun_seeds(out: Path) -> dict[str, set[str]]:
    """The effect sweep's rows with the seeds trained and evaluated again by the sweep (not carried over); a row whose
    seeds are rerun one by one holds both kinds for a while."""
    return {row.name: {d.name.removeprefix("seed") for d in row.glob("seed*")
                       if (d / "eval" / "summary.json").exists() and not table.carried_over(d / "eval")}
            for row in sorted(p for p in out.iterdir() if p.is_dir())}


def _rerun_rows(out: Path) -> set[str]:
    """The rows with a seed rerun by the sweep."""
    return {row for row, seeds in _rerun_seeds(out).items() if seeds}


def test_the_effect_sweeps_folders_rebuild_effect_jsons_rows():
    """benchmarks/sweeps/effect.yaml's committed folders (effect.json's evaluations, carried over, and the rows
    rerun since): ``--table`` gives every carried-over row's recorded numbers, a rerun row's seeds are the sweep's
    own runs (run.json, every step), and the committed table.{json,md} are that rebuild."""
    cfg, rows = _effect_sweep()
    record = json.loads(EFFECT.read_text())
    got = table.collect(cfg, rows)
    assert list(got["rows"]) == list(rows) and got["n"] == 500 and got["baseline"] == "base"
    bases = {"base": record["bases"][next(iter(record["bases"]))], "base_auto": record["base"]}
    rerun = _rerun_seeds(Path(cfg.output_dir))
    assert all(rerun[r] == {"0", "1", "2"} for r in ("grpo", "azr", "mae", "trl_grpo")), rerun
    assert not any(rerun[b] for b in bases)
    for name, r in got["rows"].items():
        for k in rerun[name]:  # the sweep's own run: its run.json, every step, its sweep command
            p, run = r["per_seed"][k], Path(cfg.output_dir) / name / f"seed{k}"
            config = OmegaConf.load(run / "config.yaml")
            assert p["steps"] == config.trainer.max_steps, (name, k)
            if (name, k) in RAN_BEFORE_RUN_JSON:  # no launch record: its config and its evaluation say float32
                assert not (run / "run.json").exists() and p["command"] is None, (name, k)
                assert config.model.dtype == "float32" and config.seed == int(k), (name, k)
                assert [json.loads(f.read_text())["dtype"] for f in (run / "eval").glob("*/results.json")] == [
                    "float32"], (name, k)
                continue
            assert (run / "run.json").exists(), (name, k)
            # trained in float32 on every start (the rows pin model.dtype; earlier seeds' `auto` resolved to it)
            assert {s["dtype"] for s in json.loads((run / "run.json").read_text())} == {"float32"}, (name, k)
            assert p["command"].endswith(f"seed={k} output_dir=benchmarks/results/sweeps/effect/{name}/seed{k}")
        carried = sorted(set(r["per_seed"]) - rerun[name])
        if rerun[name] and carried:  # seeds rerun one by one: the row says so, each carried seed is as recorded
            assert r["mixed"] == {"carried_over": [int(k) for k in carried],
                                  "rerun": sorted(int(k) for k in rerun[name])}, name
            want = record["methods"][name]["per_seed"]
            assert [r["per_seed"][k]["diff"] for k in carried] == pytest.approx(
                [want[k]["diff"] for k in carried], abs=1e-12), name
            assert [r["per_seed"][k]["command"] for k in carried] == [want[k]["command"] for k in carried], name
            continue
        assert "mixed" not in r, name
        if rerun[name]:
            assert set(r["per_seed"]) == rerun[name] <= {str(k) for k in rows[name].get("seeds") or cfg.seeds}
            continue
        if name in bases:
            assert r["accuracy"] == pytest.approx(sum(bases[name]["items"]) / 500, abs=1e-12), name
            assert r["per_seed"]["0"]["items"] == bases[name]["items"] and r["answer_chars"] == bases[name]["answer_chars"]
            continue
        want = record["methods"][name]
        assert r["accuracy"] == pytest.approx(want["after"], abs=1e-12), name
        assert r["accuracy_ci"] == pytest.approx(want["after_ci"], abs=1e-12), name
        assert (r["paired"]["diff"], r["paired"]["low"], r["paired"]["high"]) == pytest.approx(
            (want["diff"], want["diff_low"], want["diff_high"]), abs=1e-12), name
        assert (r["paired"]["improved"], r["paired"]["worsened"]) == (want["improved"], want["worsened"]), name
        assert [p["diff"] for p in r["per_seed"].values()] == pytest.approx(
            [p["diff"] for p in want["per_seed"].values()], abs=1e-12), name
        assert (r["over_seeds"]["low"], r["over_seeds"]["high"]) == pytest.approx(
            (want["over_seeds"]["low"], want["over_seeds"]["high"]), abs=1e-12), name
        assert (r["train_s"], r["answer_chars"]) == (want["train_s"], want["chars_after"]), name
        assert [p["command"] for p in r["per_seed"].values()] == [p["command"] for p in want["per_seed"].values()]
    assert {got["rows"][r]["baseline"] for r in ("grpo", "trl_grpo", "azr", "mae")} == {"base"}  # all float32
    out = Path(cfg.output_dir)
    assert (out / "table.json").read_text() == table.dumps(got)
    assert (out / "table.md").read_text() == table.markdown(got)



def _points(x: float | None) -> str:
    return "–" if x is None else f"{x:+.3f}".replace("-", "−")


def test_the_results_doc_and_the_readme_quote_the_effect_table():
    """docs/results.md's effect table and README's methods table give the committed effect table's numbers (after,
    paired interval, interval over seeds, seeds), so a rerun row's new numbers cannot stay prose of the old ones."""
    got = json.loads((ROOT / "benchmarks" / "results" / "sweeps" / "effect" / "table.json").read_text())["rows"]
    doc = {m.group(1): [c.replace("**", "").strip() for c in m.group(2).split(" | ")]
           for m in re.finditer(r"^\| `([\w.\-]+)` \| (.*) \|$", (ROOT / "docs" / "results.md").read_text(), re.M)}
    quoted = 0
    for name, r in got.items():
        if r["recipe"] is None:  # the untrained bases: the "before" column
            continue
        _, seeds, moved, paired, spread, _ = doc[name]
        p, o = r["paired"], r["over_seeds"]
        assert seeds == str(len(r["seeds"])), name
        assert moved.endswith(f"→ {r['accuracy']:.3f}"), (name, moved)
        assert paired == f"{_points(p['diff'])} [{_points(p['low'])}, {_points(p['high'])}]", (name, paired)
        want = "–" if o["low"] is None else f"[{_points(o['low'])}, {_points(o['high'])}]"
        assert spread == want, (name, spread)
        quoted += 1
    assert quoted >= 15
    readme = (ROOT / "README.md").read_text()
    for name in ("comas", "sage", "azr", "mae", "grpo"):
        p = got[name]["paired"]
        cell = f"[{100 * p['diff']:+.1f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}]](docs/results.md)"
        assert cell.replace("-", "−") + f", {len(got[name]['seeds'])} seeds" in readme, name


def test_the_results_doc_and_the_readme_quote_the_maestro_selectors_table():
    """The effect table's `maestro` row and README's MAESTRO cell are maestro_selectors' `clpo` row, paired with
    its untrained central agent (before → after, paired interval, interval over seeds, seeds)."""
    got = json.loads((ROOT / "benchmarks" / "results" / "sweeps" / "maestro_selectors" / "table.json").read_text())
    r, base = got["rows"]["clpo"], got["rows"]["prompt_only"]
    row = re.search(r"^\| `maestro` \| (.*) \|$", (ROOT / "docs" / "results.md").read_text(), re.M)
    _, seeds, moved, paired, spread, _ = [c.replace("**", "").strip() for c in row.group(1).split(" | ")]
    p, o = r["paired"], r["over_seeds"]
    assert seeds == str(len(r["seeds"])) and moved == f"{base['accuracy']:.3f} → {r['accuracy']:.3f}"
    assert paired == f"{_points(p['diff'])} [{_points(p['low'])}, {_points(p['high'])}]"
    assert spread == ("–" if o["low"] is None else f"[{_points(o['low'])}, {_points(o['high'])}]")
    cell = f"[{100 * p['diff']:+.1f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}]](docs/results.md)"
    assert cell.replace("-", "−") + f", {len(r['seeds'])} seeds" in (ROOT / "README.md").read_text()


def test_convert_effect_writes_the_committed_folders(tmp_path):
    """benchmarks/sweeps/convert_effect.py, run again, gives the committed folders file for file, byte for byte;
    no run state (config.yaml, checkpoint, adapters) among them."""
    from benchmarks.sweeps import convert_effect

    cfg, _ = _effect_sweep()
    committed = Path(cfg.output_dir)
    rerun = _rerun_seeds(committed)  # their folders are the sweep's own runs now

    def swept(p: Path) -> bool:
        return len(p.parts) > 1 and p.parts[1].removeprefix("seed") in rerun.get(p.parts[0], ())

    convert_effect.convert(json.loads(EFFECT.read_text()), EFFECT_SWEEP, tmp_path)
    made = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*")
            if p.is_file() and not swept(p.relative_to(tmp_path))}
    assert made == {p: (committed / p).read_bytes() for p in made}
    files = {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
    assert {p for p in files if not swept(p)} - set(made) == {
        Path("table.json"), Path("table.md"), Path("curves.png")}
    assert all(p.parts[-1] in ("summary.json", "items.jsonl") for p in made)


def test_a_row_with_its_own_command_trains_with_it_and_is_finished_by_its_adapter(tmp_path, capsys):
    rows = GOOD + """  trl:
    recipe: grpo
    preset: cpu-learn
    command: [-m, benchmarks.sweeps.trl_grpo]
    overrides: [trainer.max_steps=2]
"""
    path = _sweep_file(tmp_path, rows)
    cfg, rows_cfg = spec.load_sweep(path)
    (job,) = spec.plan(cfg, rows_cfg, ["trl"])
    where = tmp_path / "out" / "trl" / "seed0"
    train, evaluate = job.commands(python="py")
    assert train == ["py", "-m", "benchmarks.sweeps.trl_grpo", "--preset", "cpu-learn", "trainer.max_steps=2",
                     "seed=0", f"output_dir={where}"]
    assert evaluate[1:4] == ["-m", "selfevo", "eval"] and f"adapters=[{where / 'adapters/final/agent0'}]" in evaluate
    (where / "checkpoint").mkdir(parents=True)  # a selfevo checkpoint means nothing to another trainer: no resume
    assert job.commands(python="py")[0] == train
    (where / "adapters" / "final" / "agent0").mkdir(parents=True)
    (where / "adapters" / "final" / "agent0" / "adapter_config.json").write_text("{}")
    assert [c[3] for c in job.commands()] == ["eval"]  # its adapter is there: trained
    assert cli.main(["sweep", str(path), "--dry-run", "--only", "trl"]) == 0
    assert "  selfevo eval benchmark=arith" in capsys.readouterr().out
    assert spec.shown(train) == f"python -m benchmarks.sweeps.trl_grpo --preset cpu-learn trainer.max_steps=2 " \
                                f"seed=0 output_dir={where}"


def test_a_file_another_row_writes_first_is_left_out_of_the_checks(tmp_path, capsys):
    slates = tmp_path / "out" / "base" / "seed0" / "eval" / "arith-maestro_select" / "items.jsonl"
    rows = GOOD.replace("base: {}", "base: {setup: maestro_select}") + f"""  replay:
    setup: maestro_select
    eval_set: [slates={slates}]
"""
    assert cli.main(["sweep", str(_sweep_file(tmp_path, rows)), "--dry-run"]) == 0
    assert f"slates={slates}" in capsys.readouterr().out
    assert spec.written_by_sweep(f"slates={slates}", tmp_path / "out")
    assert not spec.written_by_sweep(f"output_dir={slates}", tmp_path / "out")
    assert not spec.written_by_sweep(f"slates={tmp_path / 'elsewhere.jsonl'}", tmp_path / "out")
    outside = rows.replace(f"slates={slates}", f"slates={tmp_path / 'elsewhere.jsonl'}")  # not the sweep's: checked
    assert cli.main(["sweep", str(_sweep_file(tmp_path, outside)), "--dry-run"]) == 2
    assert "cannot read slates=" in capsys.readouterr().err


SWEEP_FILES = sorted((ROOT / "benchmarks" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] * (p.stem != "smoke"))
                                  for p in SWEEP_FILES])  # 1-7 s each (effect: 21 rows × 3 seeds): smoke is quick
def test_every_sweep_file_passes_its_dry_run_and_trains_nothing(path, monkeypatch, capsys):
    """Each file under benchmarks/sweeps/: every row × seed's run config and evaluation keys are valid (the dry run
    checks them all), and the dry run writes nothing (no run folder appears)."""
    monkeypatch.chdir(ROOT)  # the files' output_dirs are relative to the repository root
    cfg, rows = spec.load_sweep(path)
    had = Path(cfg.output_dir).exists()
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"the dry run started {a}"))
    assert cli.main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert re.match(r"\d+ runs, \d+ with work left, in ", out)
    assert all(f"\n{row} seed " in out for row in rows)
    assert Path(cfg.output_dir).exists() == had


def test_the_adapter_manifest_names_each_row_its_command_seed_and_hash():
    """benchmarks/results/adapters.json: the seed-0 adapters behind docs/results.md left git; their command, seed and
    SHA-256 (of the bf16 PEFT copy) stay; where a copy is on disk (benchmarks/results/adapters/<row>/, ignored) it is
    the one hashed."""
    import hashlib

    manifest = json.loads((ROOT / "benchmarks" / "results" / "adapters.json").read_text())["adapters"]
    record = json.loads(EFFECT.read_text())["methods"]
    cfg, _ = _effect_sweep()
    swept = json.loads((Path(cfg.output_dir) / "table.json").read_text())["rows"]
    rerun = _rerun_rows(Path(cfg.output_dir))  # their adapter is the sweep's run's, named by its command
    assert {a["row"] for a in manifest} == {"grpo", "trl_grpo", "sage", "sage_no_planner",
                                            "comas_judge_1.0_lr5e-4_role"}
    for a in manifest:
        runs = swept if a["row"] in rerun else record
        assert a["command"] == runs[a["row"]]["per_seed"][str(a["seed"])]["command"], a["row"]
        assert len(a["adapter_model.safetensors sha256"]) == 64
        file = ROOT / "benchmarks" / "results" / "adapters" / a["row"] / "adapter_model.safetensors"
        if file.exists():
            assert hashlib.sha256(file.read_bytes()).hexdigest() == a["adapter_model.safetensors sha256"], a["row"]
    tracked = subprocess.run(["git", "ls-files", "benchmarks/results/adapters"], cwd=ROOT, capture_output=True,
                             text=True)
    assert tracked.returncode != 0 or tracked.stdout == ""  # no adapter under git (outside a git checkout: moot)
