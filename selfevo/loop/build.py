"""Small builders that turn config sections into live objects; recipes call them instead of repeating set-up."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from selfevo import distributed, heap
from selfevo.config import ConfigError
from selfevo.models import dtype_reason, resolve_device
from selfevo.policy import LoraSettings, PolicyStore
from selfevo.types import SamplingParams


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def policy_store(model: DictConfig, map_layer_blocks: bool = False, **settings) -> PolicyStore:
    """A store for ``model`` (dtype, LoRA); ``settings`` go to :class:`PolicyStore` (lr, micro_batch, betas, ...).
    Blocks of 8 MB and more get their own mappings from now on (:func:`selfevo.heap.map_large_blocks`: glibc's heap
    otherwise fragments under a checkpointed forward, 2.8 GB resident for 0.4 GB of tensors in a MAESTRO slate);
    with ``map_layer_blocks`` (``trainer.map_layer_blocks``), during an update also those of one layer's input,
    whatever the micro-batch (:func:`selfevo.heap.layer_threshold`). A user's ``MALLOC_MMAP_THRESHOLD_`` wins."""
    if heap.map_large_blocks() and map_layer_blocks:
        settings["heap_threshold"] = heap.MMAP_THRESHOLD
    lora = LoraSettings(r=model.lora.r, alpha=model.lora.alpha, dropout=model.lora.dropout,
                        target_modules=model.lora.target_modules)
    try:
        device = resolve_device(model.device)
    except ValueError as exc:
        raise ConfigError(f"model.device: {exc}") from None
    store = PolicyStore(dtype=model.dtype, lora=lora, device=device, **settings)
    if model.dtype == "auto" and distributed.is_main():
        print(f"selfevo: model.dtype=auto -> {store.dtype} ({dtype_reason(store.dtype, store.device)})",
              file=sys.stderr, flush=True)
    return store


def add_agents(store: PolicyStore, names: list[str], backbones: list[str]) -> None:
    """Agent i gets ``backbones[i % len(backbones)]``: several backbones = heterogeneous agents."""
    for i, name in enumerate(names):
        store.add_agent(name, backbones[i % len(backbones)])


def sampling(cfg: DictConfig) -> SamplingParams:
    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)


def init_adapters(store: PolicyStore, agents: list[str], folder: str) -> list[str]:
    """Load ``folder/<agent>`` (PEFT format, e.g. an SFT run's ``adapters/final``) into each agent that has one;
    returns the agents loaded. None at all is a one-line :class:`ConfigError`."""
    root = Path(folder)
    loaded = [a for a in agents if (root / a / "adapter_model.safetensors").exists()]
    if not loaded:
        raise ConfigError(f"model.init_adapters: no adapter for any of {agents} in '{folder}' (looked for "
                          f"{folder}/<agent>/adapter_model.safetensors)")
    for agent in loaded:
        store.load_adapter(agent, root / agent)
    return loaded
