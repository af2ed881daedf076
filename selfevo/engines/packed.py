"""Prepacked oneDNN matmuls for the frozen linear layers during CPU generation (when vLLM's CPU build is present).

``torch.nn.functional.linear`` re-lays-out the weight on every call; vLLM's CPU build ships oneDNN GEMMs whose
weights are packed once (``create_onednn_mm``). At decode shapes (32 rows × SmolLM2's layers) they are 1.4-1.8×
faster. While :class:`PackedLinears` is open, every frozen bf16 ``nn.Linear`` of the model (the LoRA layers' base
layers and the LM head) computes through its packed copy; the packed copies are made once per module and kept
(+ one copy of the frozen weights in memory). Without vLLM, or for other dtypes, it changes nothing.
"""
from __future__ import annotations

import functools
import importlib.util
from contextlib import ExitStack

import torch


@functools.cache
def onednn_ops():
    """vLLM's custom CPU ops if they offer oneDNN GEMMs that run bf16 on this CPU, else None (then callers use
    torch's own matmul: the same products, without the packing)."""
    if importlib.util.find_spec("vllm") is None or torch.cuda.is_available():
        return None
    try:
        from vllm import _custom_ops as ops
    except Exception:  # a vLLM build without CPU kernels
        return None
    if not getattr(ops, "_supports_onednn", False):
        return None
    return ops if _bf16_gemm_runs(ops) else None


def _bf16_gemm_runs(ops) -> bool:
    """Whether oneDNN can build a bf16 GEMM on this CPU. The build says it supports oneDNN, but a CPU without
    AVX-512 BF16 or AMX (an AVX2-only x86, or ``ONEDNN_MAX_CPU_ISA=AVX2``) has no bf16 matmul primitive: creating one
    raises ``RuntimeError: could not create a primitive descriptor``."""
    try:
        weight = torch.zeros(16, 16, dtype=torch.bfloat16)
        ops.onednn_mm(ops.create_onednn_mm(weight.t(), 32), torch.zeros(2, 16, dtype=torch.bfloat16), None)
    except RuntimeError:
        return False
    return True


def _packed_forward(module: torch.nn.Linear, ops):
    key = (module.weight.data_ptr(), module.weight._version)
    if getattr(module, "_selfevo_packed_key", None) != key:
        module._selfevo_packed = ops.create_onednn_mm(module.weight.detach().t(), 32)
        module._selfevo_packed_key = key
    handler, bias, n = module._selfevo_packed, module.bias, module.out_features

    def forward(x: torch.Tensor) -> torch.Tensor:
        return ops.onednn_mm(handler, x.reshape(-1, x.shape[-1]), bias).view(*x.shape[:-1], n)

    return forward


class PackedLinears:
    """Context manager: frozen bf16 linears of ``model`` run through prepacked oneDNN GEMMs (see module doc)."""

    def __init__(self, model):
        self.model = model
        self._stack = ExitStack()

    def __enter__(self) -> "PackedLinears":
        ops = onednn_ops()
        if ops is None:
            return self
        for name, module in self.model.named_modules():
            if type(module) is torch.nn.Linear and module.weight.dtype == torch.bfloat16 \
                    and module.weight.device.type == "cpu" and not module.weight.requires_grad and "lora_" not in name:
                module.forward = _packed_forward(module, ops)
                self._stack.callback(module.__dict__.pop, "forward", None)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()


def frozen_linear_into(weight: torch.Tensor):
    """``(x2d, out2d) -> out2d += x2d @ weight.T`` in place, for a weight that stays fixed while the callable lives.
    torch's path accumulates in the GEMM itself (``addmm_``): no ``[rows, out]`` temporary is allocated and added.
    At LoRA's expand shapes (a rank-16 input, 1,536 outputs, a 2,688-token prefill, fp32) that is ~4 ms against
    ~21 ms for matmul-then-add inside a forward (the temporary's fresh pages and the extra pass over the output);
    the packed oneDNN path (bf16 with vLLM's ops) computes the product and adds it."""
    ops = onednn_ops() if weight.dtype == torch.bfloat16 and weight.device.type == "cpu" else None
    if ops is None:
        wt = weight.t()
        return lambda x, out: out.addmm_(x, wt)
    handler = ops.create_onednn_mm(weight.t(), 32)
    return lambda x, out: out.add_(ops.onednn_mm(handler, x, None))


def frozen_linear(weight: torch.Tensor):
    """``x2d -> x2d @ weight.T`` for a weight that stays fixed while the callable lives: a packed oneDNN GEMM for
    bf16 on CPUs with vLLM's ops (about 2× faster than torch at LoRA's small shapes), else ``torch.matmul``."""
    ops = onednn_ops() if weight.dtype == torch.bfloat16 and weight.device.type == "cpu" else None
    if ops is None:
        wt = weight.t()
        return lambda x: torch.matmul(x, wt)
    handler = ops.create_onednn_mm(weight.t(), 32)
    return lambda x: ops.onednn_mm(handler, x, None)
