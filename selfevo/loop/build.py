"""Small builders that turn config sections into live objects; recipes call them instead of repeating set-up."""
from __future__ import annotations

import inspect
import random
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from selfevo import distributed, heap
from selfevo.config import ConfigError
from selfevo.models import dtype_reason, resolve_device
from selfevo.optimizers import OPTIMIZERS, Optimizer
from selfevo.optimizers.trainer import parse_logprob_temperature
from selfevo.policy import LoraSettings, PolicyStore, StoreSettings
from selfevo.types import SamplingParams


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def policy_store(model: DictConfig, trainer: DictConfig | None = None) -> PolicyStore:
    """A store for ``model`` (dtype, device, LoRA) that updates its agents as ``trainer`` says (lr, AdamW betas and
    decay, micro-batch, ...; None: :class:`StoreSettings`' defaults). Blocks of 8 MB and more get their own mappings
    from now on (:func:`selfevo.heap.map_large_blocks`: glibc's heap otherwise fragments under a checkpointed
    forward, 2.8 GB resident for 0.4 GB of tensors in a MAESTRO slate); with ``trainer.map_layer_blocks``, during an
    update also those of one layer's input, whatever the micro-batch (:class:`selfevo.heap.LayerBlocks`). A user's
    ``MALLOC_MMAP_THRESHOLD_`` wins."""
    mapped = heap.map_large_blocks()
    lora = LoraSettings(r=model.lora.r, alpha=model.lora.alpha, dropout=model.lora.dropout,
                        target_modules=model.lora.target_modules)
    try:
        device = resolve_device(model.device)
    except ValueError as exc:
        raise ConfigError(f"model.device: {exc}") from None
    update = {} if trainer is None else update_settings(trainer, mapped)
    store = PolicyStore(StoreSettings(dtype=model.dtype, device=device, lora=lora, **update))
    if model.dtype == "auto" and distributed.is_main():
        print(f"selfevo: model.dtype=auto -> {store.dtype} ({dtype_reason(store.dtype, store.device)})",
              file=sys.stderr, flush=True)
    return store


def update_settings(t: DictConfig, mapped: bool) -> dict:
    """The :class:`StoreSettings` fields the ``trainer`` section sets (``mapped``: whether glibc's threshold could
    be fixed, so that ``trainer.map_layer_blocks`` can follow layer blocks)."""
    return dict(lr=t.lr, micro_batch=t.micro_batch, max_grad_norm=t.max_grad_norm, betas=(t.adam_beta1, t.adam_beta2),
                weight_decay=t.weight_decay, optim_state_dtype=t.optim_state_dtype,
                gradient_checkpointing=t.gradient_checkpointing, shared_prompts=t.shared_prompts,
                packed_attention=t.packed_attention,
                heap_threshold=heap.MMAP_THRESHOLD if mapped and t.map_layer_blocks else None,
                logprob_temperature=parse_logprob_temperature(t.logprob_temperature))


def add_agents(store: PolicyStore, names: list[str], backbones: list[str]) -> None:
    """Agent i gets ``backbones[i % len(backbones)]``: several backbones = heterogeneous agents."""
    for i, name in enumerate(names):
        store.add_agent(name, backbones[i % len(backbones)])


def optimizer(cfg: DictConfig) -> Optimizer:
    """The optimizer ``trainer.optimizer`` names, built from the run's trainer section and the config sections its
    registered factory declares: each keyword parameter after the trainer section names one (CLPO's ``clpo``) and
    gets the run's section of that name, or the factory's default where the recipe's config has no such section."""
    factory = OPTIMIZERS.get(cfg.trainer.optimizer)
    sections = list(inspect.signature(factory).parameters)[1:]
    return factory(cfg.trainer, **{name: cfg[name] for name in sections if name in cfg})


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
