"""Engines: ``hf`` (transformers + peft, masked multi-LoRA), ``vllm`` (vLLM multi-LoRA, versioned adapters) and
``vllm_server`` (vLLM OpenAI-compatible servers over HTTP, hot-loaded versioned adapters)."""
from selfevo.engines.base import ENGINES, Engine, EngineError, render_prompt
from selfevo.engines.hf import HFEngine
from selfevo.engines.vllm import VLLMEngine
from selfevo.engines.vllm_server import VLLMServerEngine


def make_engine(name: str, store, **kwargs) -> Engine:
    """Build the engine registered as ``name`` over a :class:`~selfevo.policy.PolicyStore` from keyword
    arguments (code that builds an engine by hand)."""
    return ENGINES.get(name)(store, **kwargs)


def build_engine(section, store, dtype: str, workdir: str | None = None) -> Engine:
    """The engine of an ``engine`` config section (:class:`~selfevo.config.EngineCfg`: ``selfevo run`` and
    ``selfevo eval``) over ``store``: the class registered as ``section.name`` reads its own section
    (``from_config``: ``engine.hf``, ...); ``dtype`` is the model's, ``workdir`` where it may write (adapters, server
    logs)."""
    return ENGINES.get(section.name).from_config(section, store, dtype, workdir)


__all__ = ["ENGINES", "Engine", "EngineError", "HFEngine", "VLLMEngine", "VLLMServerEngine", "build_engine",
           "make_engine", "render_prompt"]
