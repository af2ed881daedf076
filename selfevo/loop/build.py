"""Small builders that turn config sections into live objects; recipes call them instead of repeating set-up."""
from __future__ import annotations

import random

import numpy as np
import torch
from omegaconf import DictConfig

from selfevo.config import ConfigError
from selfevo.engines import make_engine
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


def engine(cfg: DictConfig, store: PolicyStore, dtype: str, workdir: str | None = None):
    if cfg.name == "hf":
        return make_engine("hf", store, max_batch=cfg.max_batch)
    if cfg.name == "vllm_server":
        return make_engine("vllm_server", store, url=cfg.url, dtype=dtype, max_loras=cfg.max_loras,
                           max_model_len=cfg.max_model_len, max_lora_rank=_vllm_rank(store), replicas=cfg.replicas,
                           startup_timeout=cfg.startup_timeout, request_timeout=cfg.request_timeout,
                           server_args=cfg.server_args, launcher=cfg.launcher,
                           restarts=cfg.restarts, workdir=workdir)
    return make_engine(cfg.name, store, dtype=dtype, max_loras=cfg.max_loras, max_model_len=cfg.max_model_len,
                       max_lora_rank=_vllm_rank(store), workdir=workdir)


def _vllm_rank(store: PolicyStore) -> int:
    """vLLM accepts only some max_lora_rank values; take the smallest that fits every adapter."""
    r = store.lora.r
    return next(v for v in (8, 16, 32, 64, 128, 256, 320, 512) if v >= r)


def sampling(cfg: DictConfig) -> SamplingParams:
    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
