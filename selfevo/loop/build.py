"""Small builders that turn config sections into live objects; recipes call them instead of repeating set-up."""
from __future__ import annotations

import random

import numpy as np
import torch
from omegaconf import DictConfig

from selfevo.config import ConfigError
from selfevo.models import resolve_device
from selfevo.policy import LoraSettings, PolicyStore
from selfevo.types import SamplingParams


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def policy_store(model: DictConfig, **settings) -> PolicyStore:
    """A store for ``model`` (dtype, LoRA); ``settings`` go to :class:`PolicyStore` (lr, micro_batch, betas, ...)."""
    lora = LoraSettings(r=model.lora.r, alpha=model.lora.alpha, dropout=model.lora.dropout,
                        target_modules=model.lora.target_modules)
    try:
        device = resolve_device(model.device)
    except ValueError as exc:
        raise ConfigError(f"model.device: {exc}") from None
    return PolicyStore(dtype=model.dtype, lora=lora, device=device, **settings)


def add_agents(store: PolicyStore, names: list[str], backbones: list[str]) -> None:
    """Agent i gets ``backbones[i % len(backbones)]``: several backbones = heterogeneous agents."""
    for i, name in enumerate(names):
        store.add_agent(name, backbones[i % len(backbones)])


def sampling(cfg: DictConfig) -> SamplingParams:
    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
