"""AdamW whose moment estimates are stored in a compact dtype (bfloat16): half the optimizer memory per agent.

Each agent owns an AdamW over its LoRA parameters; in fp32 its two moments cost twice the adapter itself (~39 MB
per SmolLM2-135M agent at r=16), which dominates what an extra agent costs. Here the moments are kept in
``state_dtype`` between steps and the update is computed in fp32 — the same equations as ``torch.optim.AdamW``
(decoupled weight decay, bias-corrected moments), with the moments rounded to bf16 after each step (8 mantissa
bits: a relative error of at most 2^-9 per stored value, which Adam's normalised update tolerates; 8-bit Adam
variants store far less). Parameters and gradients keep their own dtype.
"""
from __future__ import annotations

import math

import torch


class CompactAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, state_dtype: torch.dtype = torch.bfloat16):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid AdamW settings: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.state_dtype = state_dtype

    def load_state_dict(self, state_dict) -> None:
        """torch casts loaded moments to the parameters' dtype; put them back into ``state_dtype``."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].to(self.state_dtype)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype)
                state["step"] += 1
                t = float(state["step"])
                g = p.grad.float()
                m = state["exp_avg"].to(torch.float32, copy=True).lerp_(g, 1 - b1)
                v = state["exp_avg_sq"].to(torch.float32, copy=True).mul_(b2).addcmul_(g, g, value=1 - b2)
                state["exp_avg"].copy_(m)
                state["exp_avg_sq"].copy_(v)
                denom = (v.sqrt_() / math.sqrt(1 - b2 ** t)).add_(eps)
                update = m.div_(denom).mul_(lr / (1 - b1 ** t))
                if wd:
                    p.mul_(1 - lr * wd)
                p.sub_(update.to(p.dtype))
        return loss
