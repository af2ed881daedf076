"""Several LoRA adapters in one batch, as two dense matmuls per layer ("masked multi-LoRA").

PEFT's own mixed-adapter path (``adapter_names=``) splits every layer's input into one sub-batch per adapter, which
costs many small kernels per layer and step. Here every adapter in the batch is stacked once per ``generate`` call:

    A = [A_1; ...; A_n]   (sum r_i × in)      B = [B_1 ... B_n]   (out × sum r_i)
    delta = ((x A^T) ⊙ M) B^T,   M[b, block i] = scaling_i if row b uses adapter i else 0

so a row only receives its own adapter's update (a row with no adapter receives none) at the price of computing all
n shrinks, which is cheap for small ranks. PEFT's LoRA layers are switched off meanwhile (``disable_adapter``), so
the base output comes from the frozen weights and the delta from the hook. The weights are read live at ``__enter__``:
an optimizer step before the next ``generate`` is always served.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Sequence

import torch


def lora_layers(model) -> list:
    from peft.tuners.lora import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def _stack(layer, names: Sequence[str], dtype) -> tuple[torch.Tensor, torch.Tensor, list[int], list[float]]:
    a = torch.cat([layer.lora_A[n].weight for n in names], dim=0).to(dtype)
    b = torch.cat([layer.lora_B[n].weight for n in names], dim=1).to(dtype)
    return a, b, [layer.r[n] for n in names], [float(layer.scaling[n]) for n in names]


def row_mask(row_adapters: Sequence[str | None], names: Sequence[str], ranks: list[int], scales: list[float],
             dtype) -> torch.Tensor:
    """[rows, sum r] selector: row b gets ``scaling_i`` on the columns of its adapter i, 0 elsewhere."""
    mask = torch.zeros(len(row_adapters), sum(ranks), dtype=dtype)
    starts = [sum(ranks[:i]) for i in range(len(ranks))]
    index = {n: i for i, n in enumerate(names)}
    for row, name in enumerate(row_adapters):
        if name is not None:
            i = index[name]
            mask[row, starts[i]:starts[i] + ranks[i]] = scales[i]
    return mask


class MultiLoRA:
    """Context manager: while open, row b of every forward of ``peft_model`` uses adapter ``row_adapters[b]``."""

    def __init__(self, peft_model, row_adapters: Sequence[str | None]):
        self.model = peft_model
        self.rows = list(row_adapters)
        self.names = sorted({a for a in self.rows if a is not None})
        self._stack = ExitStack()
        self._masks: dict[tuple, list[torch.Tensor]] = {}  # one mutable holder per (ranks, scales, dtype)

    def __enter__(self) -> "MultiLoRA":
        self._stack.enter_context(self.model.disable_adapter())
        if not self.names:
            return self
        masks = self._masks
        for layer in lora_layers(self.model):
            dtype = layer.get_base_layer().weight.dtype
            a, b, ranks, scales = _stack(layer, self.names, dtype)
            key = (tuple(ranks), tuple(scales), dtype)
            if key not in masks:
                masks[key] = [row_mask(self.rows, self.names, ranks, scales, dtype)]
            handle = layer.register_forward_hook(_delta_hook(a, b, masks[key]))
            self._stack.callback(handle.remove)
        return self

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows in ``keep`` (finished rows dropped from the batch), for every layer's mask."""
        for holder in self._masks.values():
            holder[0] = holder[0].index_select(0, keep)

    def __exit__(self, *exc) -> None:
        self._stack.close()


def _delta_hook(a: torch.Tensor, b: torch.Tensor, holder: list[torch.Tensor]):
    def hook(module, args, output):
        x, mask = args[0], holder[0]
        shrink = torch.matmul(x, a.t())
        rows = mask.shape[0]
        m = mask.view(rows, *([1] * (shrink.dim() - 2)), mask.shape[1])
        return output + torch.matmul(shrink * m, b.t())

    return hook
