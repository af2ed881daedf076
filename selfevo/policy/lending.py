"""Lending a PeftModel to an external trainer and taking it back as it was lent.

Why this exists: :meth:`PolicyStore.lend <selfevo.policy.store.PolicyStore.lend>` hands the store's live model to
code it does not control (TRL's DPOTrainer, a hand-written loop), and such code changes the model beyond the adapter
it was asked to train. TRL 1.x adds a frozen ``ref`` adapter (its reference policy), patches ``forward`` of the
PeftModel and of the causal LM (its fused LM head), switches gradient checkpointing on, may move the model to
another device, and leaves every flag it set. The store serves the same model to the engines, the scoring and the
other agents' updates afterwards, so each of these changes would leak into them; :func:`lent` records what it
touches and undoes it on exit.
"""
from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def lent(model, lm, agent: str, agents: list[str]) -> Iterator[object]:
    """``model`` (a PeftModel over the causal LM ``lm``) with ``agent``'s adapter active, its LoRA weights the only
    trainable parameters, in train mode. On exit: adapters not in ``agents`` are deleted, ``forward`` methods set on
    ``model`` or ``lm`` undone, gradient checkpointing switched off if it was off, device, ``requires_grad`` flags
    and eval mode restored."""
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    forwards = [(m, vars(m).get("forward")) for m in (model, lm)]
    checkpointing, device = lm.is_gradient_checkpointing, next(model.parameters()).device
    model.set_adapter(agent)
    for n, p in model.named_parameters():
        p.requires_grad_(f".{agent}." in n and "lora_" in n)
    model.train()
    try:
        yield model
    finally:
        model.set_adapter(agent)
        for name in [a for a in model.peft_config if a not in agents]:
            model.delete_adapter(name)
        _restore_forwards(forwards)
        if lm.is_gradient_checkpointing and not checkpointing:
            lm.gradient_checkpointing_disable()
        model.to(device)
        for n, p in model.named_parameters():
            p.requires_grad_(grads.get(n, False))
        model.eval()


def _restore_forwards(forwards: list[tuple[object, object]]) -> None:
    """Each module's instance ``forward`` as recorded (None: it had none, so a borrower's patch is deleted)."""
    for m, forward in forwards:
        if forward is not None:
            m.forward = forward
        elif "forward" in vars(m):
            del m.forward
