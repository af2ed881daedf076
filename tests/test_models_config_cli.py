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
    ("agents=abc", "bad value for 'agents'"),
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
    assert "tiny-random" in capsys.readouterr().out


def test_cli_runs_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["run", "demo", "agents=3", "model.backbones=[tiny-random]", "sampling.max_new_tokens=5",
                   f"output_dir={out}"])
    assert rc == 0
    lines = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["agent"] for x in lines} == {"agent0", "agent1", "agent2"}
    assert "agents: 3" in (out / "config.yaml").read_text()
