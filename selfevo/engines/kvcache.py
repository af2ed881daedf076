"""A KV cache for the HF engine that grows by doubling instead of concatenating at every step.

transformers' ``DynamicLayer`` runs ``torch.cat`` over the whole cache for every new token: at batch 32 that copy
cost more than all the attention maths of a SmolLM2 decode step. ``GrowingLayer`` writes each step into spare,
zero-initialised capacity and hands attention the *whole* buffer: a view of the filled part would be
non-contiguous and get copied by every attention matmul. Attention therefore sees more keys than the mask covers;
:func:`selfevo.attention.gqa_attention` treats keys past the mask as masked out (they are zeros, never NaN).
So this cache is only for models whose attention is ``selfevo_gqa``.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from selfevo.attention import NAME


class GrowingLayer(DynamicLayer):
    _buf: tuple[torch.Tensor, torch.Tensor] | None = None
    _len: int = 0
    reserve: int = 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self._buf is None or self._len + n > self._buf[0].shape[-2]:  # the reserve if it is enough, else double
            need = self._len + n
            self._grow(key_states, value_states, self.reserve if need <= self.reserve else 2 * need)
        for buf, new in zip(self._buf, (key_states, value_states)):
            buf[..., self._len:self._len + n, :].copy_(new)
        first = self._len == 0
        self._len += n
        self._expose()
        if first:  # prefill: exactly the new keys (contiguous, no spare capacity for a long query to sweep)
            return key_states, value_states
        return self.keys, self.values

    def _grow(self, k: torch.Tensor, v: torch.Tensor, capacity: int) -> None:
        new = tuple(x.new_zeros(*x.shape[:-2], capacity, x.shape[-1]) for x in (k, v))
        if self._buf is not None:
            for dst, src in zip(new, self._buf):
                dst[..., :self._len, :].copy_(src[..., :self._len, :])
        self._buf = new

    def _expose(self) -> None:
        self.keys, self.values = self._buf  # whole buffers: contiguous (see the module docstring)

    def get_seq_length(self) -> int:
        return self._len

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._buf is not None:
            self._buf = tuple(b.index_select(0, indices) for b in self._buf)
            self._expose()


def growing_cache(config, capacity: int = 0) -> DynamicCache:
    """A ``DynamicCache`` whose full-attention layers grow in place (sliding-window layers stay as they are).

    ``capacity``: tokens to reserve up front (prompt + new tokens), so the buffers never need to grow.
    """
    cache = DynamicCache(config=config)
    if getattr(config, "_attn_implementation", None) != NAME:
        return cache
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            layer.__class__ = GrowingLayer
            layer.reserve = capacity
    return cache


def key_width(cache: DynamicCache) -> int:
    """The keys a decode step's attention sweeps, averaged over the layers (rounded): a growing layer's whole
    buffer (spare capacity included, see the module doc), another layer's cached keys (a sliding window's)."""
    widths = [layer.keys.shape[-2] for layer in cache.layers if getattr(layer, "keys", None) is not None]
    return round(sum(widths) / len(widths)) if widths else 0


def bytes_per_token(config, element_size: int) -> int:
    """KV-cache bytes one token of one row costs over all layers: keys and values of ``num_key_value_heads`` heads
    of ``head_dim`` (default ``hidden_size / num_attention_heads``) per layer (SmolLM2-135M: 30 × 2 × 3 × 64
    elements, 46,080 bytes in float32). Sliding-window layers are counted whole (an upper bound)."""
    config = getattr(config, "text_config", None) or config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers * 2 * kv_heads * head_dim * element_size


def admissible(running: int, width: int, left: int, waiting: list[tuple[int, int]], budget: int) -> int:
    """How many of ``waiting`` (in order; each ``(prompt tokens, new tokens)``) join a batch of ``running`` rows
    whose filled cache is ``width`` wide with at most ``left`` tokens still to come: the most whose merged cache,
    ``rows × capacity`` tokens (capacity: the widest prompt or ``width``, plus the most tokens to come, plus one
    for a merge), fits ``budget`` tokens. Into an empty batch at least one joins (a request alone always runs);
    ``budget`` 0: no limit."""
    if not budget:
        return len(waiting)
    n, wide, more = 0, width, left
    for prompt, new in waiting:
        wide, more = max(wide, prompt), max(more, new)
        if (running + n + 1) * (wide + more + (1 if running else 0)) > budget:
            break
        n += 1
    return max(n, 0 if running else min(1, len(waiting)))


# ---- continuous batching: rows leave and join a live cache ------------------------------------------------------
def mergeable(cache: DynamicCache) -> bool:
    """Whether rows can join this cache mid-flight: every layer keeps all keys (full attention). A sliding-window
    layer keeps only its window, whose left edge differs between rows that joined at different times."""
    return all(type(layer) in (DynamicLayer, GrowingLayer) for layer in cache.layers)


def _filled(layer) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(layer, GrowingLayer):
        return layer._buf[0][..., :layer._len, :], layer._buf[1][..., :layer._len, :]
    return layer.keys, layer.values


def _set(layer, k: torch.Tensor, v: torch.Tensor, length: int) -> None:
    if isinstance(layer, GrowingLayer):
        layer._buf, layer._len = (k, v), length
        layer._expose()
    else:
        layer.keys, layer.values = k[..., :length, :], v[..., :length, :]


def select_rows(cache: DynamicCache, rows: torch.Tensor, lead: int = 0) -> None:
    """Keep batch rows ``rows`` and drop the first ``lead`` positions (left padding no kept row attends to)."""
    if not lead:
        cache.batch_select_indices(rows)
        return
    for layer in cache.layers:
        if isinstance(layer, GrowingLayer):
            k, v = (b.index_select(0, rows)[..., lead:, :].contiguous() for b in layer._buf)
            _set(layer, k, v, layer._len - lead)
        else:
            k, v = (x.index_select(0, rows)[..., lead:, :].contiguous() for x in (layer.keys, layer.values))
            _set(layer, k, v, k.shape[-2])


def merge_rows(cache: DynamicCache, keep: list[int], lead: int, other: DynamicCache, width_b: int,
               capacity: int) -> int:
    """Rows ``keep`` of ``cache`` (their first ``lead`` positions dropped: padding none of them attends to), then all
    of ``other``'s rows, both right-aligned (left-padded with zeros) to the wider of the two filled widths, in one
    copy; growing layers get ``capacity`` positions. Returns the merged width (the callers pad their attention
    masks to match). Both caches must be :func:`mergeable`."""
    width_a = cache.layers[0].get_seq_length() - lead if cache.layers else 0
    width = max(width_a, width_b)
    whole = keep == list(range(len(keep))) and len(keep) == _filled(cache.layers[0])[0].shape[0]
    for layer, extra in zip(cache.layers, other.layers):
        merged = []
        for a, b in zip(_filled(layer), _filled(extra)):
            size = capacity if isinstance(layer, GrowingLayer) else width
            out = a.new_zeros(len(keep) + b.shape[0], a.shape[1], max(size, width), a.shape[-1])
            if whole:
                out[:len(keep), :, width - width_a:width].copy_(a[..., lead:, :])
            else:
                for i, j in enumerate(keep):  # row by row: one copy of the kept rows, no gathered temporary
                    out[i, :, width - width_a:width].copy_(a[j, :, lead:, :])
            out[len(keep):, :, width - width_b:width].copy_(b)
            merged.append(out)
        _set(layer, *merged, width)
    return width
