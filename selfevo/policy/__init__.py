"""The trainable side: one model per backbone, one LoRA adapter + AdamW per agent, and the kernels it uses.

- :mod:`~selfevo.policy.store`: :class:`PolicyStore` (adapters, per-agent AdamW, reference = adapter disabled,
  micro-batched log-probs, PEFT-format save/load) and its :class:`StoreSettings`.
- :mod:`~selfevo.policy.lending`: lending the model to an external trainer and taking it back as it was.
- :mod:`~selfevo.policy.batch`: :class:`SeqBatch` (right-padded rows, loss mask, per-row extras).
- :mod:`~selfevo.policy.logprobs`: chosen-token log-probs without a full-vocabulary fp32 log-softmax.
- :mod:`~selfevo.policy.lora_compute`: LoRA computed in the activation dtype (fp32 master weights).
"""
from selfevo.policy.batch import SeqBatch
from selfevo.policy.store import Backbone, LoraSettings, PolicyStore, StoreSettings

__all__ = ["Backbone", "LoraSettings", "PolicyStore", "SeqBatch", "StoreSettings"]
