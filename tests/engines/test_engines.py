"""Engines (selfevo.engines): one built from the engine section through its registered class (which reads its own
section), and vLLM's max_lora_rank for the store's adapters."""
from omegaconf import OmegaConf

from selfevo.config import EngineCfg, HFEngineCfg, VLLMEngineCfg, VLLMServerEngineCfg
from selfevo.engines import HFEngine, VLLMEngine, VLLMServerEngine, build_engine
from selfevo.engines.base import vllm_lora_rank
from selfevo.policy import LoraSettings


def test_build_engine_reads_the_section_through_the_registered_class(make_store):
    store = make_store(agents=("a0",))
    section = EngineCfg(name="hf", hf=HFEngineCfg(max_batch=5, kv_cache_gib=0.5, continuous=False))
    engine = build_engine(OmegaConf.structured(section), store, "float32")
    assert isinstance(engine, HFEngine) and (engine.max_batch, engine.continuous) == (5, False)
    assert engine.kv_cache_gib == 0.5
    # vLLM's max_lora_rank: the smallest accepted value that fits every adapter (the store's rank without agents)
    assert vllm_lora_rank(store) == 8
    store.add_agent("wide", "tiny-random", LoraSettings(r=20, alpha=40))
    assert vllm_lora_rank(store) == 32
    assert vllm_lora_rank(make_store(agents=())) == 8


def test_the_vllm_engines_read_their_own_sections(make_store):
    """``engine.vllm`` and ``engine.vllm_server`` each hold vLLM's settings: each engine takes its own, never the
    other's (the constructors are replaced by ones that keep what they were given)."""
    class KeepVLLM(VLLMEngine):
        def __init__(self, store, settings, workdir=None):
            self.settings = settings

    class KeepServer(VLLMServerEngine):
        def __init__(self, store, **kwargs):
            self.kwargs = kwargs

    section = OmegaConf.structured(EngineCfg(
        name="vllm", vllm=VLLMEngineCfg(max_loras=2, max_model_len=1024, prefix_caching=False),
        vllm_server=VLLMServerEngineCfg(max_loras=3, max_model_len=2048, url="http://h:1", restarts=0)))
    store = make_store(agents=("a0",))
    settings = KeepVLLM.from_config(section, store, "float32").settings
    assert (settings["max_loras"], settings["max_model_len"], settings["enable_prefix_caching"]) == (2, 1024, False)
    kwargs = KeepServer.from_config(section, store, "float32").kwargs
    assert (kwargs["max_loras"], kwargs["max_model_len"], kwargs["prefix_caching"]) == (3, 2048, True)
    assert (kwargs["url"], kwargs["restarts"], kwargs["request_timeout"]) == ("http://h:1", 0, 600.0)
