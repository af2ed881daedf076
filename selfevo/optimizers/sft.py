"""Supervised fine-tuning as an optimizer: the token-mean negative log-likelihood of the rows whose reward is
positive (e.g. correct selections, verified solutions); rows with reward ≤ 0 are left out of the step, and rows are
scored at temperature 1 whatever they were sampled at (maximum likelihood of the model's own distribution, as
supervised trainers fit it; a tempered likelihood would fit π^(1/T) instead). Also the ``none`` optimizer (no update),
for prompt-only baselines."""
from __future__ import annotations

import torch

from selfevo.optimizers.base import OPTIMIZERS, Optimizer, Samples
from selfevo.optimizers.objectives import count_tokens, token_mean
from selfevo.optimizers.trainer import TrainerCfg
from selfevo.policy import PolicyStore, SeqBatch
from selfevo.policy.batch import TEMPERATURE


@OPTIMIZERS.register("sft")
def sft(cfg: TrainerCfg) -> Optimizer:
    def update(store: PolicyStore, agent: str, samples: Samples) -> dict:
        keep = [i for i, r in enumerate(samples.rewards.tolist()) if r > 0]
        if not keep:
            return {"loss": 0.0, "grad_norm": 0.0, "skipped": True, "rows": 0}
        batch = samples.batch.rows(keep).without_extras(TEMPERATURE)  # scored at 1 (module doc)
        n = count_tokens([batch.loss_mask])

        def loss_fn(logp: torch.Tensor, mb: SeqBatch) -> torch.Tensor:
            return token_mean(-logp, mb.loss_mask, n)

        return {**store.update(agent, batch, loss_fn), "rows": len(keep)}

    return Optimizer(update)


@OPTIMIZERS.register("none")
def no_update(cfg: TrainerCfg) -> Optimizer:
    """No update: prompt-only baselines (the run still collects, rewards and logs; adapters stay as they are)."""

    def update(store: PolicyStore, agent: str, samples: Samples) -> dict:
        return {"loss": 0.0, "grad_norm": 0.0, "skipped": True, "rows": int(samples.rewards.shape[0])}

    return Optimizer(update, trains=False)
