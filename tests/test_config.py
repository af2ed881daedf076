"""Configs (selfevo.config): validation by ``opt`` metadata (choices, lazy choices, bounds, non-empty, required), the
``check`` hook, ``describe``, every recipe's schema and presets described and valid, and loading a preset with
overrides (one-line errors with a suggestion, missing presets, unreadable YAML)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from omegaconf import MISSING, OmegaConf

from selfevo.algorithms import RECIPES, demo
from selfevo.config import (RENAMED, ConfigError, SamplingCfg, VLLMEngineCfg, describe, format_table, load_config,
                            normalize_overrides, opt, presets, renamed_key, validate_config)

CALLS = []


def _colours() -> list[str]:
    CALLS.append(1)
    return ["red", "green", "blue"]


@dataclass
class Inner:
    steps: int = opt(3, "steps", ge=1)
    rate: float = opt(0.5, "a rate", gt=0, le=1)
    colour: str = opt("red", "lazy choices", choices=_colours)


@dataclass
class Schema:
    name: str = opt(MISSING, "what to call it", nonempty=True)
    mode: str = opt("full", "the mode", choices=("full", "without_evaluation", "without_scoring"))
    tags: list[str] = opt(["a"], "tags", item_choices=("a", "b"), nonempty=True)
    limit: int | None = opt(None, "optional bound", ge=1)
    inner: Inner = opt(Inner, "a section")
    sampling: SamplingCfg = opt(SamplingCfg(max_new_tokens=7), "a section with an instance default")

    @staticmethod
    def check(cfg) -> None:
        if cfg.inner.steps > 10 and cfg.mode != "full":
            raise ConfigError(f"inner.steps > 10 needs mode=full, got mode={cfg.mode}")


def load(*overrides: str):
    return load_config(Schema, "test", None, ["name=x", *overrides])


@pytest.mark.parametrize("override, message", [
    ("inner.steps=0", "inner.steps must be >= 1, got 0"),
    ("inner.rate=0", "inner.rate must be in (0, 1], got 0.0"),
    ("inner.rate=1.5", "inner.rate must be in (0, 1], got 1.5"),
    ("mode=nonsense", "mode must be one of full, without_evaluation, without_scoring; got 'nonsense'"),
    ("mode=ful", "got 'ful' (did you mean 'full'?)"),
    ("inner.colour=bleu", "inner.colour must be one of red, green, blue; got 'bleu' (did you mean 'blue'?)"),
    ("tags=[a,c]", "unknown tags 'c'"),
    ("tags=[]", "tags must not be empty"),
    ("name=", "name must not be empty"),
    ("limit=0", "limit must be >= 1, got 0"),
    ("sampling.top_p=0", "sampling.top_p must be in (0, 1], got 0.0"),
    ("inner.steps=abc", "inner.steps must be an integer, got 'abc'"),
    ("inner.stepz=3", "unknown config key 'inner.stepz' in the command line; did you mean 'inner.steps'?"),
])
def test_bad_values_are_one_line_errors_naming_key_and_range(override, message):
    with pytest.raises(ConfigError) as e:
        load(override)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_required_key_and_good_values():
    with pytest.raises(ConfigError, match=r"^name= is required: what to call it$"):
        load_config(Schema, "test", None, [])
    cfg = load("limit=null", "inner.rate=1", "tags=a,b", "inner.colour=blue")
    assert cfg.limit is None and cfg.inner.rate == 1.0 and list(cfg.tags) == ["a", "b"]
    assert cfg.sampling.max_new_tokens == 7


def test_lazy_choices_are_called_only_when_validating():
    CALLS.clear()
    OmegaConf.structured(Schema)
    assert CALLS == []
    load()
    assert CALLS


def test_check_hook_runs_after_field_checks():
    with pytest.raises(ConfigError, match="needs mode=full"):
        load("inner.steps=11", "mode=without_scoring")
    with pytest.raises(ConfigError, match="mode must be one of"):  # the field check comes first
        load("inner.steps=11", "mode=nonsense")
    cfg = OmegaConf.merge(OmegaConf.structured(Schema), {"name": "x", "inner": {"steps": 11}})
    validate_config(cfg, Schema)  # mode=full: fine


def test_comma_lists_and_empty_values():
    assert normalize_overrides(Schema, ["tags=a,b", "tags=[a]", "name=a,b", "tags=", "name=", "limit=", "x=1"]) == \
        ["tags=[a,b]", "tags=[a]", "name=a,b", "tags=[]", "name=''", "limit=", "x=1"]
    assert load("limit=").limit is None


def test_describe_lists_every_leaf_with_default_range_and_help():
    rows = {key: (default, allowed, help) for key, default, allowed, help in describe(Schema)}
    assert list(rows) == ["name", "mode", "tags", "limit", "inner.steps", "inner.rate", "inner.colour",
                          "sampling.max_new_tokens", "sampling.temperature", "sampling.top_p"]
    assert rows["name"][0] == MISSING and rows["inner.steps"] == (3, "int >= 1", "steps")
    assert rows["inner.rate"][1] == "float in (0, 1]" and rows["limit"][1] == "int >= 1, or null"
    assert rows["inner.colour"][1] == "red | green | blue"
    assert rows["tags"] == (["a"], "list[str], each a | b, non-empty", "tags")
    assert rows["sampling.max_new_tokens"][0] == 7  # the section's instance default, not the class default
    table = format_table(Schema).splitlines()
    assert table[0].split() == ["key", "default", "allowed", "meaning"] and "(required)" in table[1]
    assert len({line.index("meaning") if i == 0 else None for i, line in enumerate(table)}) == 2


@pytest.mark.parametrize("recipe", RECIPES.names())
def test_every_recipe_key_has_help(recipe):
    missing = [key for key, _, _, help in describe(RECIPES.get(recipe).config_class()) if not help.strip()]
    assert not missing, f"{recipe}: config keys without help: {', '.join(missing)}"


def test_every_recipe_class_has_its_own_name():
    """One name a class across the recipes (``comas.CoMASCfg``, not a ``Config`` in every module)."""
    import inspect

    owner = {}
    for name in RECIPES.names():
        module = RECIPES.get(name).load()
        assert RECIPES.get(name).config_class().__module__ == module.__name__
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                assert owner.setdefault(cls_name, name) == name, f"{cls_name} in {owner[cls_name]} and {name}"


@pytest.mark.parametrize("recipe, preset", [(r, p) for r in RECIPES.names() for p in presets(r)])
def test_every_preset_validates(recipe, preset):
    cfg = load_config(RECIPES.get(recipe).config_class(), recipe, preset, [])
    assert cfg.recipe == recipe


@pytest.mark.parametrize("override, message", [
    ("agent=3", "did you mean 'n_agents'"),
    ("model.lora.rr=3", "did you mean 'model.lora.r'"),
    ("n_agents=abc", "n_agents must be an integer, got 'abc'"),
    ("agents=2", "config key 'agents' in the command line was renamed to 'n_agents'"),
    ("agents", "not of the form key=value"),
])
def test_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(demo.DemoCfg, "demo", "cpu", [override])


def test_config_preset_and_overrides_merge():
    cfg = load_config(demo.DemoCfg, "demo", "cpu", ["n_agents=2", "model.lora.r=8", "model.backbones=[a,b]"])
    assert cfg.n_agents == 2 and cfg.model.lora.r == 8 and list(cfg.model.backbones) == ["a", "b"]
    assert cfg.sampling.max_new_tokens == 96  # from the preset file


def test_missing_preset_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no preset 'nope'"):
        load_config(demo.DemoCfg, "demo", "nope", [])
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [1,\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(demo.DemoCfg, "demo", str(bad), [])


@pytest.mark.parametrize("override, message", [
    ("inner.stepcount=3", "config key 'inner.stepcount' in the command line was renamed to 'inner.steps'"),
    ("old.rate=0.5", "config key 'old.rate' in the command line was renamed to 'inner.rate'"),
])
def test_renamed_keys_are_one_line_errors_naming_the_new_key(monkeypatch, override, message):
    monkeypatch.setitem(RENAMED, "inner.stepcount", "inner.steps")
    monkeypatch.setitem(RENAMED, "old", "inner")  # a renamed section: every key under it
    with pytest.raises(ConfigError) as e:
        load(override)
    assert str(e.value) == message


def test_renamed_keys_in_a_preset_file(monkeypatch, tmp_path):
    monkeypatch.setitem(RENAMED, "inner.stepcount", "inner.steps")
    path = tmp_path / "old.yaml"
    path.write_text("name: x\ninner:\n  stepcount: 3\n")
    with pytest.raises(ConfigError, match=f"config key 'inner.stepcount' in {path} was renamed to 'inner.steps'"):
        load_config(Schema, "test", str(path), [])


def test_renamed_key():
    assert renamed_key("a.b.c", {"a.b": "x"}) == ("x.c",)
    assert renamed_key("a.b", {"a.b": "x.y"}) == ("x.y",)
    assert renamed_key("a.bc", {"a.b": "x"}) == ()
    assert renamed_key("a.b.c", {"a.b": ("x", "y.z")}) == ("x.c", "y.z.c")  # a key that moved into two sections
    assert renamed_key("agents") == ("n_agents",)
    # nested paths: the engine's flat keys moved into the section of each engine that takes them
    assert renamed_key("engine.continuous") == ("engine.hf.continuous",)
    assert renamed_key("engine.url") == ("engine.vllm_server.url",)
    assert renamed_key("engine.max_model_len") == ("engine.vllm.max_model_len", "engine.vllm_server.max_model_len")
    assert renamed_key("engine.name") == () and renamed_key("engine.hf.continuous") == ()


def test_the_engine_section_has_one_section_per_engine():
    """``engine.name`` plus ``engine.hf.*``, ``engine.vllm.*``, ``engine.vllm_server.*``: nothing else at ``engine.*``,
    and every key that sat flat in ``engine`` names the section keys it moved to."""
    keys = [key for key, *_ in describe(demo.DemoCfg) if key.startswith("engine.")]
    assert [k for k in keys if k.count(".") == 1] == ["engine.name"]
    assert {k.split(".")[1] for k in keys if k.count(".") == 2} == {"hf", "vllm", "vllm_server"}
    flat = [old for old in RENAMED if old.startswith("engine.")]
    assert len(flat) == 15 and {new for old in flat for new in renamed_key(old)} == set(keys) - {"engine.name"}


@pytest.mark.parametrize("override, message", [
    ("engine.continuous=false", "'engine.continuous' in the command line was renamed to 'engine.hf.continuous'"),
    ("engine.max_batch=8", "'engine.max_batch' in the command line was renamed to 'engine.hf.max_batch'"),
    ("engine.restarts=0", "'engine.restarts' in the command line was renamed to 'engine.vllm_server.restarts'"),
    ("engine.gpu_memory_utilization=0.5", "'engine.gpu_memory_utilization' in the command line was renamed to "
     "'engine.vllm.gpu_memory_utilization' or 'engine.vllm_server.gpu_memory_utilization'"),
])
def test_an_old_flat_engine_key_names_its_new_key(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(demo.DemoCfg, "demo", "cpu", [override])
    assert str(e.value) == "config key " + message


@pytest.mark.parametrize("recipe", [r for r in RECIPES.names() if "paper" in presets(r)])
def test_the_paper_presets_give_both_vllm_engines_the_same_vllm_settings(recipe):
    """A paper preset runs on ``engine.name=vllm`` and, switched to ``vllm_server``, with the same vLLM settings."""
    cfg = load_config(RECIPES.get(recipe).config_class(), recipe, "paper", ["engine.name=vllm_server"])
    vllm, server = cfg.engine.vllm, cfg.engine.vllm_server
    assert vllm.max_model_len > 4096 and not vllm.enforce_eager  # the preset's, not the defaults
    assert all(server[f.name] == vllm[f.name] for f in dataclasses.fields(VLLMEngineCfg))


def test_each_engine_reads_its_own_section():
    cfg = load_config(demo.DemoCfg, "demo", "cpu", ["engine.hf.continuous=false", "engine.vllm.max_model_len=512",
                                                    "engine.vllm_server.max_model_len=2048"])
    assert cfg.engine.hf.continuous is False and cfg.engine.hf.max_batch == 64
    assert cfg.engine.vllm.max_model_len == 512 and cfg.engine.vllm_server.max_model_len == 2048
    # the response must fit the chosen engine's own max_model_len
    with pytest.raises(ConfigError, match=r"^sampling.max_new_tokens must be < engine.vllm.max_model_len \(512\)"):
        load_config(demo.DemoCfg, "demo", "cpu", ["engine.name=vllm", "engine.vllm.max_model_len=512",
                                                  "sampling.max_new_tokens=512"])
    load_config(demo.DemoCfg, "demo", "cpu", ["engine.name=vllm_server", "engine.vllm.max_model_len=512",
                                              "sampling.max_new_tokens=512"])  # vllm_server's own is 4096


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_preset_with_the_old_agents_key_names_the_new_one(recipe, tmp_path):
    """Every recipe's config (a RunCfg, or the demo's own) refuses ``agents:`` with the key that replaced it."""
    path = tmp_path / "old.yaml"
    path.write_text("agents: 2\n")
    schema = RECIPES.get(recipe).config_class()
    with pytest.raises(ConfigError, match=f"^config key 'agents' in {path} was renamed to 'n_agents'$"):
        load_config(schema, recipe, str(path), [])
