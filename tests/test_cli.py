import json

import pytest

from selfevo import cli, models
from selfevo.algorithms import demo
from selfevo.config import ConfigError, load_config


def test_unknown_model_is_one_line_with_suggestion():
    with pytest.raises(models.ModelError) as e:
        models.resolve("smollm2-135m-instruc")
    assert "did you mean 'smollm2-135m-instruct'" in str(e.value) and "\n" not in str(e.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(models.ModelError, match="no config.json"):
        models.resolve(str(tmp_path))


def test_hub_id_goes_through_snapshot_download(monkeypatch, tmp_path):
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: calls.append(repo) or str(tmp_path))
    assert models.resolve("Qwen/Qwen2.5-3B-Instruct") == str(tmp_path)
    assert calls == ["Qwen/Qwen2.5-3B-Instruct"]


def test_hub_failure_is_one_line(monkeypatch):
    import huggingface_hub

    def fail(repo, **kw):
        raise OSError("network unreachable\nmore detail")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(models.ModelError) as e:
        models.resolve("org/model")
    assert "\n" not in str(e.value) and "network unreachable" in str(e.value)


def test_embedded_model_loads_with_chat_template():
    tok = models.load_tokenizer("smollm2-135m-instruct")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>assistant" in text
    model = models.load_model("smollm2-135m-instruct")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


@pytest.mark.parametrize("override, message", [
    ("agent=3", "did you mean 'agents'"),
    ("model.lora.rr=3", "did you mean 'model.lora.r'"),
    ("agents=abc", "agents must be an integer, got 'abc'"),
    ("agents", "not of the form key=value"),
])
def test_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(demo.Config, "demo", "cpu", [override])


def test_config_preset_and_overrides_merge():
    cfg = load_config(demo.Config, "demo", "cpu", ["agents=2", "model.lora.r=8", "model.backbones=[a,b]"])
    assert cfg.agents == 2 and cfg.model.lora.r == 8 and list(cfg.model.backbones) == ["a", "b"]
    assert cfg.sampling.max_new_tokens == 96  # from the preset file


def test_missing_preset_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no preset 'nope'"):
        load_config(demo.Config, "demo", "nope", [])
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [1,\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(demo.Config, "demo", str(bad), [])


def test_cli_errors_are_one_line(capsys):
    assert cli.main(["run", "demo", "agent=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'agents'" in err
    assert cli.main(["frobnicate"]) == 2
    assert cli.main(["--help"]) == 0
    assert cli.main(["ls"]) == 0
    out = capsys.readouterr().out
    assert "tiny-random" in out
    # the kit's registries: roles with their kind, reward sources, optimizers
    assert "generic.selector         selector" in out and "comas.scorer             scorer" in out
    assert ("reward sources: critic_score, format, interaction_scores, majority_vote, sage_challenge, sage_plan_solve, "
            "slate") in out
    assert "optimizers: clpo, grpo, none, reinforce_pp, sft, task_relative" in out


def test_cli_runs_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "demo", "agents=3", "model.backbones=[tiny-random]", "sampling.max_new_tokens=5",
                   f"output_dir={out}"])
    assert rc == 0
    lines = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["agent"] for x in lines} == {"agent0", "agent1", "agent2"}
    assert "agents: 3" in (out / "config.yaml").read_text()


def test_run_options_and_overrides_mix_in_any_order(tmp_path, capsys):
    out = tmp_path / "never"
    argv = ["run", "demo", "--preset", "cpu", "agents=2", "--dry-run", f"output_dir={out}", "model.backbones=a,b"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "agents: 2" in printed and "- a\n  - b" in printed and not out.exists()


def test_dry_run_loads_and_writes_nothing(tmp_path, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise AssertionError("--dry-run must not load models or run the recipe")

    monkeypatch.setattr(models, "resolve", fail)
    monkeypatch.setattr(demo, "main", fail)
    out = tmp_path / "run"
    hub = "model.backbones=[Qwen/Qwen2.5-3B-Instruct]"
    assert cli.main(["run", "demo", "--dry-run", f"output_dir={out}", hub]) == 0
    assert cli.main(["run", "comas", "--preset", "paper", "trainer.max_steps=1", "--dry-run", f"output_dir={out}"]) == 0
    assert "max_steps: 1" in capsys.readouterr().out and not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["run", "demo", "agents=0"], "agents must be >= 1, got 0"),
    (["run", "demo", "sampling.temperature=-1"], "sampling.temperature must be >= 0, got -1.0"),
    (["run", "demo", "model.backbones=[]"], "model.backbones must not be empty"),
    (["run", "demo", "engine.name=vlm"], "; got 'vlm' (did you mean 'vllm'?)"),  # the engine list grows
    (["run", "demo", "agents=1", "model.backbones=[a,b]"], "agents must be >= 2"),
    (["run", "comas", "protocol.variant=nonsense"], "protocol.variant must be one of full, without_evaluation, "
                                                    "without_scoring; got 'nonsense'"),
    (["run", "comas", "trainer.max_steps=-1"], "trainer.max_steps must be >= 1, got -1"),
    (["run", "comas", "--preset", "paper", "trainer.tasks_per_step=0"], "trainer.tasks_per_step must be >= 1, got 0"),
    (["run", "demo", "--bogus"], "unrecognized arguments: --bogus"),
    (["run"], "which recipe?"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(argv + [f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("selfevo: ") and err.count("\n") == 1 and message in err
    assert not out.exists()


def test_run_recipe_help_lists_every_key_and_the_presets(capsys):
    from selfevo.config import describe

    assert cli.main(["run", "demo", "--help"]) == 0
    printed = capsys.readouterr().out
    assert "presets: cpu (default)" in printed
    for key, _, allowed, help in describe(demo.Config):
        line = next(x for x in printed.splitlines() if x.split() and x.split()[0] == key)
        assert help in line and allowed[:20] in line
    assert cli.main(["run", "--help"]) == 0 and "--dry-run" in capsys.readouterr().out
