"""Configs: one dataclass schema per recipe, YAML presets, ``key=value`` overrides (omegaconf).

``load_config(recipe, preset, overrides)`` merges schema defaults ← preset YAML ← overrides and validates keys and
types; any problem is a :class:`ConfigError` with a one-line message (an unknown key names the closest valid one).
Pieces shared by every recipe (models, LoRA, engine, sampling) live here as small dataclasses.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_DIR = Path(__file__).parent / "configs"


class ConfigError(ValueError):
    """A config problem, said in one line."""


@dataclass
class LoraCfg:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str = "all-linear"


@dataclass
class EngineCfg:
    name: str = "hf"  # hf | vllm
    max_batch: int = 64  # hf: rows per forward
    max_loras: int = 8  # vllm: adapters per batch
    max_model_len: int = 4096  # vllm


@dataclass
class SamplingCfg:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class ModelCfg:
    backbones: list[str] = field(default_factory=lambda: ["smollm2-135m-instruct"])  # agent i uses backbones[i % n]
    dtype: str = "bfloat16"
    lora: LoraCfg = field(default_factory=LoraCfg)


def _flat_keys(cfg: Any, prefix: str = "") -> list[str]:
    keys = []
    for k, v in cfg.items():
        path = f"{prefix}{k}"
        keys.append(path)
        if isinstance(v, DictConfig):
            keys.extend(_flat_keys(v, path + "."))
    return keys


def _unknown_key_error(schema: DictConfig, key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, _flat_keys(schema), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"unknown config key '{key}' in {where}{hint}")


def _merge(schema: DictConfig, other: DictConfig, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(schema, other)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
        if "not in struct" in str(exc) or "Key '" in str(exc) and "not in" in str(exc):
            raise _unknown_key_error(schema, str(key), where) from None
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"bad value for '{key}' in {where}: {first}") from None


def preset_path(recipe: str, preset: str) -> Path:
    path = Path(preset)
    if path.suffix in (".yaml", ".yml"):
        return path
    return CONFIG_DIR / recipe / f"{preset}.yaml"


def presets(recipe: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / recipe).glob("*.yaml"))


def load_config(schema_cls: type, recipe: str, preset: str | None, overrides: Sequence[str]) -> DictConfig:
    schema = OmegaConf.structured(schema_cls)
    cfg = schema
    if preset is not None:
        path = preset_path(recipe, preset)
        if not path.exists():
            known = ", ".join(presets(recipe)) or "none"
            raise ConfigError(f"no preset '{preset}' for recipe '{recipe}' (known: {known})")
        try:
            yaml = OmegaConf.load(path)
        except Exception as exc:  # YAML syntax errors
            raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
        cfg = _merge(cfg, yaml, str(path))
    bad = [o for o in overrides if "=" not in o or o.startswith("=")]
    if bad:
        raise ConfigError(f"override '{bad[0]}' is not of the form key=value")
    try:
        dot = OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"bad override: {str(exc).splitlines()[0]}") from None
    cfg = _merge(cfg, dot, "the command line")
    OmegaConf.set_readonly(cfg, False)
    return cfg


def save_config(cfg: DictConfig, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return path
