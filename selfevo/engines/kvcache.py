"""A KV cache for the HF engine that grows by doubling instead of concatenating at every step.

transformers' ``DynamicLayer`` runs ``torch.cat`` over the whole cache for every new token: at batch 32 that copy
cost more than all the attention maths of a SmolLM2 decode step. ``GrowingLayer`` writes each step into spare
capacity and hands attention a view of the filled part.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    _buf: tuple[torch.Tensor, torch.Tensor] | None = None
    _len: int = 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self._buf is None or self._len + n > self._buf[0].shape[-2]:
            self._grow(key_states, value_states, 2 * (self._len + n))
        for buf, new in zip(self._buf, (key_states, value_states)):
            buf[..., self._len:self._len + n, :].copy_(new)
        self._len += n
        self._expose()
        return self.keys, self.values

    def _grow(self, k: torch.Tensor, v: torch.Tensor, capacity: int) -> None:
        new = tuple(x.new_empty(*x.shape[:-2], capacity, x.shape[-1]) for x in (k, v))
        if self._buf is not None:
            for dst, src in zip(new, self._buf):
                dst[..., :self._len, :].copy_(src[..., :self._len, :])
        self._buf = new

    def _expose(self) -> None:
        self.keys, self.values = (b[..., :self._len, :] for b in self._buf)

    def get_seq_length(self) -> int:
        return self._len

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._buf is not None:
            self._buf = tuple(b.index_select(0, indices) for b in self._buf)
            self._expose()


def growing_cache(config) -> DynamicCache:
    """A ``DynamicCache`` whose full-attention layers grow in place (sliding-window layers stay as they are)."""
    cache = DynamicCache(config=config)
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            layer.__class__ = GrowingLayer
    return cache
