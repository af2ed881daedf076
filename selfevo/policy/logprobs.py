"""Log-probabilities of chosen tokens without materialising a full-vocabulary fp32 log-softmax.

The language-model head runs only on the positions that are scored (completion tokens), row chunk by row chunk;
the log-sum-exp is taken in fp32 while the logits stay in the model dtype. The backward pass recomputes the logits
chunk by chunk (one more head matmul per scored token) instead of keeping a [N, V] softmax, and the gradient goes to
the hidden states alone (the head is frozen under LoRA): d logp / d logits = onehot(target) - softmax.

At a sampling temperature T the logits are divided by T (verl and TRL score tokens so): since the head has no bias
here, ``(h W^T) / T = (h / T) W^T``, so the hidden states are divided (in float32, then back to their dtype) and the
``[N, V]`` logits are never scaled or copied.
"""
from __future__ import annotations

import torch


class _ChosenLogProb(torch.autograd.Function):
    """log softmax(hidden @ weight.T)[target]; the backward recomputes the logits chunk by chunk (as
    :class:`_Entropy` does), so no [N, V] tensor outlives one chunk. (Keeping the softmax for the backward held
    V values per scored token: 196 KB in float32 for SmolLM2's 49,152-token vocabulary, a third of an update's
    memory per token.) d logp / d z = onehot(target) - softmax(z)."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int):
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            logp = torch.log_softmax(hidden[s:s + chunk] @ weight.t(), dim=-1, dtype=torch.float32)  # fused upcast
            out[s:s + chunk] = logp.gather(-1, targets[s:s + chunk, None]).squeeze(-1)
            del logp  # else it lives on while the next chunk's logits and log-softmax are made
        ctx.save_for_backward(hidden, weight, targets)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        hidden, weight, targets = ctx.saved_tensors
        grad = torch.empty_like(hidden)
        g = grad_out.to(hidden.dtype)
        for s in range(0, hidden.shape[0], ctx.chunk):
            e = min(s + ctx.chunk, hidden.shape[0])
            logp = torch.log_softmax(hidden[s:e] @ weight.t(), dim=-1, dtype=torch.float32)
            grad_logits = logp.exp_().to(hidden.dtype).mul_(-g[s:e, None])  # the softmax, in the model dtype
            grad_logits[torch.arange(e - s, device=targets.device), targets[s:e]] += g[s:e]
            grad[s:e] = grad_logits @ weight
            del logp, grad_logits
        return grad, None, None, None


def scoring_temperatures(sampled: torch.Tensor, fixed: float | None = None) -> torch.Tensor:
    """The temperature each row is scored at: ``fixed`` for every row when given, else the row's own sampling
    temperature, with greedy rows (T = 0, no distribution was sampled) at 1. [B] float32."""
    t = torch.as_tensor(sampled, dtype=torch.float32)
    if fixed is not None:
        return torch.full_like(t, float(fixed))
    return torch.where(t > 0, t, torch.ones_like(t))


def tempered(hidden: torch.Tensor, temperature: torch.Tensor | float | None) -> torch.Tensor:
    """``hidden / T`` per row (``temperature``: a number or [N]; None: ``hidden`` itself), divided in float32 and
    returned in ``hidden``'s dtype: the head's logits of the result are the logits divided by T."""
    if temperature is None:
        return hidden
    t = torch.as_tensor(temperature, dtype=torch.float32, device=hidden.device)
    return (hidden.float() / (t[:, None] if t.dim() else t)).to(hidden.dtype)


def chosen_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int = 1024,
                    temperature: torch.Tensor | float | None = None):
    """log softmax(hidden @ weight.T / T)[target] for each row of ``hidden`` [N, H]; fp32 result [N]. ``temperature``
    T: a number or one per row ([N]); None: 1."""
    if weight.requires_grad:
        raise ValueError("chosen_logprobs assumes a frozen output head (LoRA does not train lm_head)")
    return _ChosenLogProb.apply(tempered(hidden, temperature), weight, targets, chunk)


def reference_chosen_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The plain formula (full fp32 log-softmax); used by tests and by the naive benchmark baseline."""
    logp = torch.log_softmax((hidden @ weight.t()).float(), dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1)


class _Entropy(torch.autograd.Function):
    """Entropy of softmax(hidden @ weight.T) per row; the backward recomputes the logits chunk by chunk, so no
    [N, V] tensor outlives one chunk. dH/dz_j = -p_j (log p_j + H)."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, chunk: int):
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            logp = torch.log_softmax(hidden[s:s + chunk] @ weight.t(), dim=-1, dtype=torch.float32)
            out[s:s + chunk] = -(logp.exp() * logp).sum(-1)
            del logp
        ctx.save_for_backward(hidden, weight, out)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        hidden, weight, ent = ctx.saved_tensors
        grad = torch.empty_like(hidden)
        for s in range(0, hidden.shape[0], ctx.chunk):
            logp = torch.log_softmax(hidden[s:s + ctx.chunk] @ weight.t(), dim=-1, dtype=torch.float32)
            dz = -logp.exp() * (logp + ent[s:s + ctx.chunk, None]) * grad_out[s:s + ctx.chunk, None]
            grad[s:s + ctx.chunk] = (dz.to(hidden.dtype) @ weight).to(hidden.dtype)
            del logp, dz
        return grad, None, None


def chosen_entropy(hidden: torch.Tensor, weight: torch.Tensor, chunk: int = 256,
                   temperature: torch.Tensor | float | None = None) -> torch.Tensor:
    """Entropy (nats, fp32 [N]) of the next-token distribution softmax(hidden @ weight.T / T) of each row of
    ``hidden`` [N, H], differentiable with respect to ``hidden`` (the head is frozen under LoRA); memory
    O(chunk × V). ``temperature`` as in :func:`chosen_logprobs`."""
    if weight.requires_grad:
        raise ValueError("chosen_entropy assumes a frozen output head (LoRA does not train lm_head)")
    return _Entropy.apply(tempered(hidden, temperature), weight, chunk)
