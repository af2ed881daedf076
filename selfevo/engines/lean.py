"""A lean decode step for Llama-family models (llama, qwen2): transformers' arithmetic without its module machinery.

At the recipes' decode shapes (a few rows) a step is mostly fixed costs: for SmolLM2-135M at 4 rows (~100-token
prompts) the matmuls, LoRA included, take ~14 ms of a ~38 ms step through transformers; the rest is mask
construction, module dispatch and hooks per layer, and element-wise work. :class:`LeanDecoder` runs the same
operations in the same order — the norms' and rotary embedding's own forwards, the cache's ``update``,
:func:`~selfevo.attention.gqa_attention` with the boolean padding mask transformers builds for one query,
the base linears as they are (packed or not) plus the :class:`~selfevo.engines.multilora.MultiLoRA` deltas their
hooks would add — over the model's own modules and weights, so its logits are the full forward's, bit for bit
(tested); the step takes ~33 ms (64-token generations, prefill included). Only single-token decode steps go this
way; prefill stays with transformers.
"""
from __future__ import annotations

import sys

import torch

from selfevo.attention import NAME, gqa_attention

FAMILIES = ("llama", "qwen2")


def supported(net) -> bool:
    """Whether ``net`` (a transformers causal LM) is a plain Llama-family decoder this module reproduces exactly:
    full attention in every layer through ``selfevo_gqa``, no tensor-parallel slicing of the projections."""
    cfg = net.config
    layer_types = getattr(cfg, "layer_types", None) or ["full_attention"]
    return (cfg.model_type in FAMILIES and getattr(cfg, "_attn_implementation", None) == NAME
            and getattr(cfg, "pretraining_tp", 1) == 1 and not getattr(cfg, "use_sliding_window", False)
            and all(t == "full_attention" for t in layer_types) and not getattr(net.model, "training", False))


def _projection(module, lora):
    """``proj(x)``: the base linear's forward (the packed one when :class:`PackedLinears` is open), plus the LoRA
    delta that :class:`MultiLoRA`'s hook adds to this layer, if any."""
    base = module.get_base_layer() if hasattr(module, "get_base_layer") else module
    forward = base.forward
    delta = lora.deltas.get(id(module)) if lora is not None else None
    if delta is None:
        return forward
    return lambda x: delta(x, forward(x))


class _Layer:
    def __init__(self, layer, lora):
        attn, mlp = layer.self_attn, layer.mlp
        self.attn = attn
        self.in_norm, self.post_norm = layer.input_layernorm.forward, layer.post_attention_layernorm.forward
        self.q, self.k, self.v, self.o = (_projection(getattr(attn, n), lora) for n in ("q_proj", "k_proj", "v_proj",
                                                                                        "o_proj"))
        self.gate, self.up, self.down = (_projection(getattr(mlp, n), lora) for n in ("gate_proj", "up_proj",
                                                                                     "down_proj"))
        self.act = mlp.act_fn.forward
        self.rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.head_dim, self.index = attn.head_dim, attn.layer_idx

    def __call__(self, h: torch.Tensor, cos, sin, mask, cache) -> torch.Tensor:
        b = h.shape[0]
        x = self.in_norm(h)
        q, k, v = (p(x).view(b, 1, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = self.rotary(q, k, cos, sin)
        k, v = cache.update(k, v, self.index)
        out, _ = gqa_attention(self.attn, q, k, v, mask, dropout=0.0, scaling=self.attn.scaling)
        h = h + self.o(out.reshape(b, 1, -1).contiguous())
        x = self.post_norm(h)
        return h + self.down(self.act(self.gate(x)) * self.up(x))


class LeanDecoder:
    """``decoder(ids [B, 1], attn [B, T], pos [B, 1], cache) -> (hidden [B, H] after the final norm, cache)``:
    one decode step of ``net`` (see the module doc). Build it while the lane's :class:`PackedLinears` and
    :class:`MultiLoRA` are open: it binds the forwards and deltas in effect then."""

    def __init__(self, net, lora=None):
        model = net.model
        self.embed, self.norm, self.rotary = model.embed_tokens.forward, model.norm.forward, model.rotary_emb
        self.layers = [_Layer(layer, lora) for layer in model.layers[:net.config.num_hidden_layers]]

    def __call__(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache):
        h = self.embed(ids)
        cos, sin = self.rotary(h, pos)
        mask = attn.bool()[:, None, None, :]  # what transformers' mask is for one query: the padding mask
        for layer in self.layers:
            h = layer(h, cos, sin, mask, cache)
        return self.norm(h)[:, -1, :], cache
