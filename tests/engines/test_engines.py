"""Engines (selfevo.engines): one built from the engine section through its registered class, and vLLM's
max_lora_rank for the store's adapters."""
from omegaconf import OmegaConf

from selfevo.config import EngineCfg
from selfevo.engines import HFEngine, build_engine
from selfevo.engines.base import vllm_lora_rank
from selfevo.policy import LoraSettings


def test_build_engine_reads_the_section_through_the_registered_class(make_store):
    store = make_store(agents=("a0",))
    engine = build_engine(OmegaConf.structured(EngineCfg(name="hf", max_batch=5)), store, "float32")
    assert isinstance(engine, HFEngine) and engine.max_batch == 5
    # vLLM's max_lora_rank: the smallest accepted value that fits every adapter (the store's rank without agents)
    assert vllm_lora_rank(store) == 8
    store.add_agent("wide", "tiny-random", LoraSettings(r=20, alpha=40))
    assert vllm_lora_rank(store) == 32
    assert vllm_lora_rank(make_store(agents=())) == 8
