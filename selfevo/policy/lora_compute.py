"""LoRA forward in the activations' dtype with fp32 master weights, for training steps.

PEFT keeps adapter weights in fp32 next to a bf16 base and casts every layer's *input activations* to fp32 (and the
update back), which on a CPU costs more than the LoRA maths itself. While :class:`ActivationDtypeLoRA` is open, each
LoRA layer of the active adapter computes ``base(x) + (x A^T) B^T · scaling`` with A and B cast to ``x.dtype``
instead: the small weights are cast, not the large activations, and gradients still reach the fp32 parameters
through the cast. The up-projection accumulates into the base output in one ``addmm``. Only plain LoRA layers of one
active adapter (no DoRA, no merged weights) are handled.
"""
from __future__ import annotations

from contextlib import ExitStack

import torch


def _forward(layer, name: str):
    a, b = layer.lora_A[name], layer.lora_B[name]
    drop, scale = layer.lora_dropout[name], layer.scaling[name]
    base = layer.get_base_layer()

    def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        out = base(x, *args, **kwargs)
        shrunk = torch.matmul(drop(x), a.weight.to(x.dtype).t())
        # out + shrunk @ (scale · B)^T as one GEMM that accumulates into the base output: no [N, out] temporaries
        # for the scaled delta and the sum (nor for their gradients)
        expand = (b.weight * scale).to(x.dtype).t()
        flat = torch.addmm(out.reshape(-1, out.shape[-1]), shrunk.reshape(-1, shrunk.shape[-1]), expand)
        return flat.view(out.shape)

    return forward


class ActivationDtypeLoRA:
    def __init__(self, peft_model, adapter: str):
        self.model, self.adapter = peft_model, adapter
        self._stack = ExitStack()

    def __enter__(self) -> "ActivationDtypeLoRA":
        from peft.tuners.lora import Linear as LoraLinear

        for m in self.model.modules():
            if type(m) is LoraLinear and self.adapter in m.lora_A and not m.merged \
                    and not m.use_dora.get(self.adapter, False):
                m.forward = _forward(m, self.adapter)
                self._stack.callback(m.__dict__.pop, "forward", None)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
