"""A grouped-query attention for transformers models that is fast on CPUs at small query lengths.

PyTorch's CPU flash-attention kernel costs ~2.7 ms per call for one decode token at batch 32 (SmolLM2 shapes),
and transformers' fallback copies K/V once per query-head group (``repeat_kv``). This function folds the query
groups into the query length instead: ``q [B, kvH, G*q, D] @ k^T [B, kvH, D, T]`` — two batched matmuls and a
softmax, no K/V copies (~0.25 ms for the same call). It is registered with transformers under the name
``"selfevo_gqa"`` (with sdpa's boolean masks, so sliding windows and padding come in the mask).

A forward without a padding mask over a whole sequence (training on right-padded rows: a padded position only
follows the real ones, so causality alone keeps it out of every real token's view) gets no mask at all and runs
SDPA's ``is_causal`` kernel, ~25% faster than the same attention with an explicit mask (forward + backward,
SmolLM2 shapes at 600 tokens). Whenever a padding mask is given (the engines always give one) the mask is built.
"""
from __future__ import annotations

import torch

NAME = "selfevo_gqa"


def gqa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """query [B, H, q, D], key/value [B, kvH, T, D], mask bool [B, 1, q, T] (True = attend) or None.

    Long queries (prefill, training) go to PyTorch's fused SDPA, which is the fast path there; single-token decode
    steps use the grouped matmuls below.
    """
    if kwargs.get("packed_segments") is not None:
        return segmented_attention(query, key, value, kwargs["packed_segments"], scaling,
                                   dropout if module.training else 0.0)
    if query.shape[2] > 1 and not kwargs.get("softcap"):
        return _sdpa(module, query, key, value, attention_mask, scaling, dropout)
    b, h, q, d = query.shape
    kvh, t = key.shape[1], key.shape[2]
    g = h // kvh
    scale = scaling if scaling is not None else d ** -0.5
    scores = torch.matmul(query.reshape(b, kvh, g * q, d), key.transpose(-1, -2)).view(b, kvh, g, q, t)
    scores = scores.float() * scale
    softcap = kwargs.get("softcap")
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        if attention_mask.shape[-1] < t:  # a growing KV cache hands over spare capacity: those keys are masked
            attention_mask = torch.nn.functional.pad(attention_mask, (0, t - attention_mask.shape[-1]), value=False)
        # finite fill: a fully masked row (a left-padding query) gets a harmless uniform row instead of NaN
        scores = scores.masked_fill(~attention_mask.unsqueeze(1), torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    if dropout and module.training:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    out = torch.matmul(probs.view(b, kvh, g * q, t), value).view(b, h, q, d)
    return out.transpose(1, 2).contiguous(), None


def _sdpa(module, query, key, value, attention_mask, scaling, dropout):
    causal = attention_mask is None and query.shape[2] == key.shape[2]  # the mask was skipped: plain causal
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout if module.training else 0.0, scale=scaling,
        is_causal=causal, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def segmented_attention(query, key, value, segments, scaling=None, dropout: float = 0.0):
    """Attention over packed shared-prompt rows (:mod:`selfevo.policy.packing`) from their ranges, without the
    ``L x L`` mask: in packed row g with ``segments[g] = (p, [(s, e), ...])`` the prompt ``[0, p)`` attends causally
    to itself, each row's own tokens ``[s, e)`` to the whole prompt and causally to themselves; positions after
    the last range (padding) get zeros. One SDPA call per prompt and per row, so the work is ``p^2 / 2 + sum n (p +
    n)`` instead of ``L^2`` (a GRPO group of 8 completions: ~3.6x less). Shapes as :func:`gqa_attention`'s;
    returns ``(out [G, L, H, D], None)``."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gqa, width = key.shape[1] != query.shape[1], query.shape[2]
    masks: dict[tuple[int, int], torch.Tensor] = {}
    rows = []
    for g, (p, spans) in enumerate(segments):
        q, k, v = query[g:g + 1], key[g:g + 1], value[g:g + 1]
        parts = [sdpa(q[:, :, :p], k[:, :, :p], v[:, :, :p], dropout_p=dropout, scale=scaling, is_causal=True,
                      enable_gqa=gqa)] if p else []
        for s, e in spans:
            n = e - s
            if (p, n) not in masks:  # own token i sees the prompt and own tokens 0..i
                masks[p, n] = torch.ones(n, p + n, dtype=torch.bool, device=query.device).tril(diagonal=p)
            parts.append(sdpa(q[:, :, s:e], torch.cat([k[:, :, :p], k[:, :, s:e]], 2),
                              torch.cat([v[:, :, :p], v[:, :, s:e]], 2), attn_mask=masks[p, n], dropout_p=dropout,
                              scale=scaling, enable_gqa=gqa))
        end = spans[-1][1] if spans else p
        if end < width:
            parts.append(q.new_zeros(1, q.shape[1], width - end, q.shape[3]))
        rows.append(torch.cat(parts, 2))
    return torch.cat(rows, 0).transpose(1, 2).contiguous(), None


def segments_supported(config) -> bool:
    """Whether a model runs :func:`segmented_attention` when given ``packed_segments``: its attention is this
    module's, with no logit soft-capping and no sliding windows (their masks are not ranges)."""
    return (getattr(config, "_attn_implementation", None) == NAME and not getattr(config, "attn_logit_softcapping", None)
            and not getattr(config, "use_sliding_window", False)
            and "sliding_attention" not in (getattr(config, "layer_types", None) or ()))


def _mask(*args, **kwargs):
    from transformers.masking_utils import sdpa_mask

    # skip only without a padding mask over a whole sequence (see the module doc); never for a growing KV cache,
    # whose spare capacity must be masked
    whole = kwargs.get("q_length") is not None and kwargs.get("q_length") == kwargs.get("kv_length")
    kwargs["allow_is_causal_skip"] = (kwargs.get("allow_is_causal_skip", True) and whole
                                      and kwargs.get("attention_mask") is None)
    return sdpa_mask(*args, **kwargs)


def register() -> str:
    """Make ``attn_implementation="selfevo_gqa"`` known to transformers (idempotent); returns the name."""
    # imported here: transformers' attention registries load its modeling code (and sympy), which the KV cache and
    # the lean decoder, importing NAME, do not need
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, gqa_attention)
    AttentionMaskInterface.register(NAME, _mask)
    return NAME
