"""Engines: ``hf`` (transformers + peft, masked multi-LoRA) and ``vllm`` (vLLM multi-LoRA, versioned adapters)."""
from selfevo.engines.base import ENGINES, Engine, render_prompt
from selfevo.engines.hf import HFEngine
from selfevo.engines.vllm import VLLMEngine


def make_engine(name: str, store, **kwargs) -> Engine:
    """Build the engine registered as ``name`` over a :class:`~selfevo.policy.PolicyStore`."""
    return ENGINES.get(name)(store, **kwargs)


__all__ = ["ENGINES", "Engine", "HFEngine", "VLLMEngine", "make_engine", "render_prompt"]
