"""Several LoRA adapters in one batch, as two dense matmuls per layer ("masked multi-LoRA").

PEFT's own mixed-adapter path (``adapter_names=``) splits every layer's input into one sub-batch per adapter, which
costs many small kernels per layer and step. Here every adapter in the batch is stacked once per ``generate`` call:

    A = [A_1; ...; A_n]   (sum r_i × in)      B = [B_1 ... B_n]   (out × sum r_i)
    delta = ((x A^T) ⊙ M) B^T,   M[b, block i] = scaling_i if row b uses adapter i else 0

so a row only receives its own adapter's update (a row with no adapter receives none) at the price of computing all
n shrinks, which is cheap for small ranks. PEFT's LoRA layers are switched off meanwhile (``disable_adapter``), so
the base output comes from the frozen weights and the delta from the hook. The weights are read live at ``__enter__``:
a parameter update before the next ``generate`` is always served.
"""
from __future__ import annotations

import weakref
from contextlib import ExitStack
from typing import Sequence

import torch

from selfevo.engines.packed import frozen_linear, frozen_linear_into


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


class _Group:
    """LoRA layers under one parent module (q/k/v/o, gate/up/down): their A matrices stacked, so layers fed the
    same input tensor (q, k and v; gate and up) share one shrink matmul.

    The shared shrink lives as long as its input does: the group holds the input by weak reference and drops the
    shrink when the input is freed. (A strong reference kept every layer's input of a forward alive until the next
    one: a 16-row prefill of ~800-token prompts held ~5 GB of them, ~0.4 MB per token.)"""

    def __init__(self, a: torch.Tensor, mask: torch.Tensor, parts: list[tuple[list[int], list[float]]]):
        self.a_mm, self.mask, self.parts = frozen_linear(a), mask, parts  # parts: each member's (ranks, scales)
        self.x: weakref.ref | None = None
        self.s: torch.Tensor | None = None

    def shrink(self, x: torch.Tensor) -> torch.Tensor:
        if self.x is None or self.x() is not x:
            s = self.a_mm(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], -1)
            s.mul_(self.mask.view(self.mask.shape[0], *([1] * (s.dim() - 2)), self.mask.shape[1]))
            self.x, self.s = weakref.ref(x, self._forget), s
        return self.s

    def _forget(self, ref: weakref.ref) -> None:
        if self.x is ref:  # (an older input's reference may die after a newer one was taken)
            self.x = self.s = None


class MultiLoRA:
    """Context manager: while open, row b of every forward of ``peft_model`` uses adapter ``row_adapters[b]``."""

    def __init__(self, peft_model, row_adapters: Sequence[str | None], names: Sequence[str] | None = None):
        """``names``: every adapter rows may use while open (default: those of ``row_adapters``); rows that join
        later (:meth:`set_rows`) may only use these."""
        self.model = peft_model
        self.rows = list(row_adapters)
        self.names = sorted(set(names or ()) | {a for a in self.rows if a is not None})
        self._stack = ExitStack()
        self._groups: list[_Group] = []
        self.deltas: dict[int, object] = {}  # id(LoRA layer) -> delta(x, output) while open (what its hook runs)

    def __enter__(self) -> "MultiLoRA":
        self._stack.enter_context(self.model.disable_adapter())
        if not self.names:
            return self
        for members in _siblings(self.model).values():
            self._hook_group(members)
        return self

    def _hook_group(self, members: list) -> None:
        stacks = [_stack(layer, self.names, layer.get_base_layer().weight.dtype) for layer in members]
        masks = [row_mask(self.rows, self.names, ranks, scales, a.dtype).to(a.device) for a, _, ranks, scales in stacks]
        group = _Group(torch.cat([a for a, *_ in stacks]), torch.cat(masks, dim=1),
                       [(ranks, scales) for _, _, ranks, scales in stacks])
        self._groups.append(group)
        start = 0
        for layer, (a, b, _, _) in zip(members, stacks):
            delta = _delta(group, start, start + a.shape[0], frozen_linear_into(b))
            self.deltas[id(layer)] = delta
            handle = layer.register_forward_hook(lambda module, args, output, d=delta: d(args[0], output))
            self._stack.callback(handle.remove)
            start += a.shape[0]

    def set_rows(self, row_adapters: Sequence[str | None]) -> None:
        """Serve ``row_adapters`` from now on (a new batch: rows joined, left, or a different batch altogether)."""
        unknown = {a for a in row_adapters if a is not None} - set(self.names)
        if unknown:
            raise KeyError(f"adapters {sorted(unknown)} were not stacked when this MultiLoRA was opened")
        self.rows = list(row_adapters)
        masks: dict[tuple, torch.Tensor] = {}  # groups with the same ranks and scales share one mask
        for g in self._groups:
            key = (tuple(map(tuple, (r for r, _ in g.parts))), tuple(map(tuple, (s for _, s in g.parts))),
                   g.mask.dtype, g.mask.device)
            if key not in masks:
                masks[key] = torch.cat([row_mask(self.rows, self.names, ranks, scales, g.mask.dtype)
                                        for ranks, scales in g.parts], dim=1).to(g.mask.device)
            g.mask, g.x, g.s = masks[key], None, None

    def __exit__(self, *exc) -> None:
        for g in self._groups:
            g.x = g.s = None
        self.deltas.clear()
        self._stack.close()


def _siblings(model) -> dict[str, list]:
    """LoRA layers grouped by parent module and input size/dtype, in module order."""
    from peft.tuners.lora import LoraLayer

    groups: dict[str, list] = {}
    for name, m in model.named_modules():
        if isinstance(m, LoraLayer):
            base = m.get_base_layer().weight
            groups.setdefault(f"{name.rpartition('.')[0]}|{base.shape[1]}|{base.dtype}", []).append(m)
    return groups


def _delta(group: _Group, start: int, end: int, expand):
    """``delta(x, output)``: output += (masked shrink of x, this layer's columns) @ B^T, in place (accumulated by
    the GEMM: :func:`~selfevo.engines.packed.frozen_linear_into`)."""
    def delta(x, output):
        part = group.shrink(x)[..., start:end]
        expand(part.reshape(-1, end - start), output.view(-1, output.shape[-1]))
        return output

    return delta
