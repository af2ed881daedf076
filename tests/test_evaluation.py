"""``selfevo eval``: argument parsing, one-line errors, and the files it writes (tiny model, 2 benchmarks x 2 setups)."""
import json

import pytest

from helpers.paths import DATA, needs_data
from selfevo import evaluation
from selfevo.evaluation import EvalError, format_table, load_eval_config, main



def test_load_eval_config_lists_defaults_and_setup_options(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
    cfg, options = load_eval_config(["benchmark=gsm8k,math500", "setup=[vanilla, consistency,maestro_select]",
                                     "limit=5", f"adapters=[{tmp_path / 'a'},{tmp_path / 'b'}]", "k=8", "epsilon=0",
                                     "sampling.temperature=0.2", "central_prefix='Reason:'"])
    assert cfg.benchmark == ["gsm8k", "math500"] and cfg.setup == ["vanilla", "consistency", "maestro_select"]
    s = cfg.sampling
    assert cfg.limit == 5 and s.temperature == 0.2 and s.top_p is None and s.max_new_tokens == 256
    assert cfg.adapters == [str(tmp_path / "a"), str(tmp_path / "b")]
    # k goes to both setups that have it, epsilon only to maestro_select; values typed as declared
    assert options == {"vanilla": {}, "consistency": {"k": 8},
                       "maestro_select": {"k": 8, "epsilon": 0.0, "central_prefix": "Reason:"}}
    assert isinstance(options["maestro_select"]["epsilon"], float)
    # the sections of selfevo run, with its defaults
    assert cfg.model.backbones == ["smollm2-135m-instruct"] and cfg.model.dtype == "auto"
    assert cfg.engine.name == "hf" and cfg.engine.hf.max_batch == 64 and cfg.seed == 0


@pytest.mark.parametrize("argv,message", [
    (["setup=vanilla"], "benchmark= is required"),
    (["benchmark=gsm8k", "setup=vanilla", "limt=3"], "unknown key 'limt' (did you mean 'limit'?)"),
    (["benchmark=gsm8k", "setup=vanilla", "k=3"], "unknown key 'k'"),  # not an option of vanilla
    (["benchmark=gsm8k", "setup=vanila"], "unknown setup 'vanila' (did you mean 'vanilla'?)"),
    (["benchmark=gsm8", "setup=vanilla"], "unknown benchmark 'gsm8'"),
    (["benchmark=gsm8k", "setup=vanilla", "limit=many"], "limit must be an integer"),
    (["benchmark=gsm8k", "setup=debate", "rounds=x"], "setup 'debate': rounds must be an integer, got 'x'"),
    (["benchmark=gsm8k", "setup=vanilla", "engine.name=tgi"], "engine.name must be one of "),  # the list grows
    (["benchmark=gsm8k", "setup=vanilla", "max_batch=8"], "unknown key 'max_batch' (did you mean 'engine.hf.max_batch'?)"),
    (["benchmark=gsm8k", "setup=vanilla", "engine.max_batch=8"],
     "config key 'engine.max_batch' in the command line was renamed to 'engine.hf.max_batch'"),
    (["benchmark=gsm8k", "setup=vanilla", "model.backbones=[a,b]"], "model.backbones has 2 entries but no adapters"),
    (["benchmark=gsm8k", "setup=vanilla", "engine.name=vllm", "sampling.max_new_tokens=5000"],
     "sampling.max_new_tokens must be < engine.vllm.max_model_len (4096)"),
    (["benchmark=gsm8k", "setup=vanilla", "adapters=[/no/such/dir]"], "has no adapter_config.json"),
    (["benchmark=gsm8k", "setup=vanilla", "oops"], "not of the form key=value"),
])
def test_bad_arguments_are_one_line_errors_with_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("selfevo eval: ")


def test_format_table():
    rec = {"benchmark": "gsm8k", "setup": "maestro_select", "n": 2, "accuracy": 0.5, "waves": 6, "generations": 60,
           "wall_time_s": 1.5, "sampling": {"temperature": 0.7}, "coverage": 1.0, "identification": 0.5}
    table = format_table([rec, {**rec, "setup": "vanilla", "coverage": None, "identification": None}])
    lines = table.splitlines()
    assert lines[0].startswith("| benchmark | setup | n | accuracy |") and "coverage | identification" in lines[0]
    assert lines[2] == "| gsm8k | maestro_select | 2 | 0.500 | 0.700 | 6 | 60 | 1.500 | 1.000 | 0.500 |"
    assert lines[3].endswith("| - | - |")


@pytest.mark.slow
@needs_data
def test_cli_writes_results_for_two_benchmarks_and_two_setups(tmp_path, capsys):
    out = tmp_path / "eval"
    rc = main(["benchmark=gsm8k,math500", "setup=vanilla,debate", "model.backbones=tiny-random", "limit=2",
               "sampling.max_new_tokens=4",
               f"output_dir={out}", f"data_root={DATA}", "rounds=1"])
    assert rc == 0
    printed = capsys.readouterr().out
    for bench in ("gsm8k", "math500"):
        for setup in ("vanilla", "debate"):
            folder = out / f"{bench}-{setup}"
            res = json.loads((folder / "results.json").read_text())
            assert (res["benchmark"], res["setup"], res["n"]) == (bench, setup, 2)
            assert 0.0 <= res["accuracy"] <= 1.0 and res["agents"] == [None]
            assert res["backbones"] == ["tiny-random"] and res["engine"] == "hf"
            assert res["waves"] == 1 and res["generations"] == (2 if setup == "vanilla" else 6)
            assert res["sampling"]["temperature"] == (0.0 if setup == "vanilla" else 0.5)  # the setups' defaults
            assert res["sampling"]["max_new_tokens"] == 4
            items = [json.loads(line) for line in (folder / "items.jsonl").read_text().splitlines()]
            assert len(items) == 2
            for item in items:
                assert item["prompt"].endswith("within \\boxed{}.")
                assert len(item["responses"]) == (1 if setup == "vanilla" else 3)
                assert {"text", "label", "agent", "wave"} <= set(item["responses"][0])
                assert {"score", "reason", "extracted"} == set(item["verdict"]) and "extracted" in item
                assert item["correct"] == (item["verdict"]["score"] >= 1.0)
            assert f"| {bench} | {setup} | 2 |" in printed
    table = (out / "table.md").read_text()
    assert len(table.splitlines()) == 6 and table in printed
    assert len(json.loads((out / "summary.json").read_text())) == 4


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@needs_data
def test_cli_loads_adapters_as_agents(tmp_path, make_store):
    store = make_store(("x",))
    store.save_adapter("x", tmp_path / "ad0")
    store.save_adapter("x", tmp_path / "ad1")
    out = tmp_path / "eval"
    adapters = f"adapters=[{tmp_path / 'ad0'},{tmp_path / 'ad1'}]"
    cfg, options = load_eval_config(["benchmark=gsm8k", "setup=maestro_select", "model.backbones=tiny-random",
                                     "limit=1", "sampling.max_new_tokens=3", f"output_dir={out}", f"data_root={DATA}",
                                     "rounds=1", "n_agents=2", "k=1", adapters])
    records = evaluation.run_eval(cfg, options, show_progress=False)
    assert records[0]["agents"] == ["agent0", "agent1"]
    item = json.loads((out / "gsm8k-maestro_select" / "items.jsonl").read_text().splitlines()[0])
    # execution agents 0 and 1 use agent0 and agent1; the central agent (no extra adapter) uses agents[0]
    assert [t["agent"] for t in item["responses"]] == ["agent0", "agent1", "agent0"]
    assert records[0]["select_parse_failures"] == 1 and "coverage" in records[0]


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@needs_data
def test_adapter_that_does_not_fit_is_a_one_line_error(tmp_path, make_store, capsys):
    import torch
    from safetensors.torch import save_file

    store = make_store(("x",))
    path = store.save_adapter("x", tmp_path / "ad")
    save_file({"bogus.lora_A.weight": torch.zeros(2, 2)}, str(path / "adapter_model.safetensors"))
    rc = main(["benchmark=gsm8k", "setup=vanilla", "model.backbones=tiny-random", "limit=1", f"data_root={DATA}",
               f"output_dir={tmp_path / 'o'}", f"adapters={path}"])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (transformers prints its weight-loading bar before)
    assert rc == 2 and last.startswith("selfevo eval: ") and "does not fit agent 'agent0'" in last


@pytest.mark.parametrize("argv,message", [
    (["benchmark=gsm8k", "setup=vanilla", "sampling.top_p=0"], "sampling.top_p must be in (0, 1], got 0.0"),
    (["benchmark=gsm8k", "setup=vanilla", "sampling.max_new_tokens=0"], "sampling.max_new_tokens must be >= 1, got 0"),
    (["benchmark=gsm8k", "setup=vanilla", "sampling.temperature=-1"], "sampling.temperature must be >= 0, got -1.0"),
    (["benchmark=gsm8k", "setup=vanilla", "model.dtype=fp8"],
     "model.dtype must be one of auto, float32, bfloat16, float16; got 'fp8'"),
    (["benchmark=", "setup=vanilla"], "benchmark must not be empty"),
    (["benchmark=gsm8k", "setup=vanilla", "--bogus"], "unrecognized arguments: --bogus"),
    (["benchmark=gsm8k", "setup=maestro_select", "epsilon=2"], "setup 'maestro_select': epsilon must be in [0, 1], "
                                                               "got 2.0"),
])
def test_ranges_and_choices_are_checked_before_anything_runs(argv, message, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(argv + [f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("selfevo eval: ") and not out.exists()


def test_preset_file_and_dry_run(tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.setattr(evaluation, "run_eval", lambda *a, **k: pytest.fail("--dry-run must not run"))
    preset = tmp_path / "my.yaml"
    preset.write_text("benchmark: [gsm8k]\nsetup: [debate]\nlimit: 3\nsampling:\n  temperature: 0.3\n")
    out = tmp_path / "eval"
    assert main(["--preset", str(preset), "limit=5", "rounds=1", f"output_dir={out}", "--dry-run"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["benchmark"] == ["gsm8k"] and printed["limit"] == 5 and printed["sampling"]["temperature"] == 0.3
    assert printed["setup_options"] == {"debate": {"rounds": 1}} and not out.exists()
    preset.write_text("limt: 3\n")
    assert main(["--preset", str(preset), "benchmark=gsm8k", "setup=vanilla"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'limt'" in err and "did you mean 'limit'" in err and err.count("\n") == 1


def test_eval_help_lists_every_key(capsys):
    from selfevo.config import describe

    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    for key, _, _, help in describe(evaluation.EvalConfig):
        assert help and any(line.split()[:1] == [key] and help in line for line in printed.splitlines())
    assert "  debate:\n" in printed and "central_mode" in printed  # each setup's declared options
