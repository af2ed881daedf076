"""Policy-gradient optimizers over rewarded samples: REINFORCE++ (CoMAS), Task-Relative REINFORCE++ (SAGE), GRPO.

All three end in the same clipped-surrogate step (:func:`~selfevo.optimizers.base.policy_update`); they differ only
in how rewards become advantages (pure functions in :mod:`selfevo.optimizers.objectives`).

``task_relative`` and ``grpo`` are ONE implementation, :func:`group_normalised` (sequence advantages normalised
within groups, broadcast over tokens), registered under two names that differ only in the grouping used when the
recipe names none (``UpdateSpec.group_by`` None): :func:`one_group` (every row of the agent: Task-Relative
REINFORCE++, whose recipes group by label) and :func:`same_prompt` (the rows of one prompt: GRPO). A recipe that
names its groups gets the same update under either name.
"""
from __future__ import annotations

from typing import Callable, Hashable

from selfevo.optimizers.base import OPTIMIZERS, WHITEN_EPS, Optimizer, Samples, policy_update, reference_logprobs
from selfevo.optimizers.objectives import kl_estimate, masked_mean, reinforce_pp_advantages, task_relative_advantages
from selfevo.optimizers.trainer import TrainerCfg
from selfevo.policy import PolicyStore

Grouping = Callable[[Samples], list[Hashable]]


@OPTIMIZERS.register("reinforce_pp")
def reinforce_pp(cfg: TrainerCfg) -> Optimizer:
    """REINFORCE++ (CoMAS Eq. 9-11): KL-penalised return, whitened over the agent's tokens — per group when
    ``samples.groups`` is given (e.g. per role, the fix for the scorer-advantage flaw)."""

    def update(store: PolicyStore, agent: str, samples: Samples) -> dict:
        batch = samples.batch
        cur, ref = reference_logprobs(store, agent, batch, cfg)
        kl = kl_estimate(cur, ref, cfg.kl_estimator) * batch.loss_mask if cur is not None else None
        beta = cfg.kl_coef if cfg.kl_in_reward else 0.0
        adv = reinforce_pp_advantages(samples.rewards, kl, batch.loss_mask, beta=beta, eps=WHITEN_EPS,
                                      group_ids=samples.groups)
        return _with_kl(policy_update(store, agent, batch, adv, cfg, ref), kl, batch.loss_mask)

    return Optimizer(update)


def one_group(samples: Samples) -> list[Hashable]:
    """Every row of the agent in one group (Task-Relative REINFORCE++ without named groups)."""
    return [0] * len(samples.rewards)


def same_prompt(samples: Samples) -> list[Hashable]:
    """One group per prompt: the rows whose prompt tokens are identical (GRPO's group of completions)."""
    b = samples.batch
    return [tuple(b.input_ids[i][(b.attention_mask[i] > 0) & (b.loss_mask[i] == 0)].tolist())
            for i in range(b.input_ids.shape[0])]


def group_normalised(cfg: TrainerCfg, default_groups: Grouping) -> Optimizer:
    """Sequence advantages ``(r - mean) / (std + ε)`` within each group (``samples.groups``, else
    ``default_groups(samples)``), broadcast over tokens; a group of one sample or of equal rewards gets advantage 0.
    With β > 0 the KL to the reference is applied either way: folded into each row's reward (``r - β Σ_t kl_t``,
    before normalisation) or as a loss term."""

    def update(store: PolicyStore, agent: str, samples: Samples) -> dict:
        batch, rewards = samples.batch, samples.rewards
        groups = samples.groups if samples.groups is not None else default_groups(samples)
        cur, ref = reference_logprobs(store, agent, batch, cfg)
        kl = kl_estimate(cur, ref, cfg.kl_estimator) * batch.loss_mask if cur is not None else None
        if kl is not None and cfg.kl_in_reward:
            rewards = rewards - cfg.kl_coef * kl.sum(-1)
        adv = task_relative_advantages(rewards, groups, eps=WHITEN_EPS)[:, None] * batch.loss_mask
        return _with_kl(policy_update(store, agent, batch, adv, cfg, ref), kl, batch.loss_mask)

    return Optimizer(update)


@OPTIMIZERS.register("task_relative")
def task_relative(cfg: TrainerCfg) -> Optimizer:
    """Task-Relative REINFORCE++ (SAGE Eq. 1): :func:`group_normalised`, groups named by the recipe (SAGE, MAE, AZR:
    per label), else :func:`one_group`."""
    return group_normalised(cfg, one_group)


@OPTIMIZERS.register("grpo")
def grpo(cfg: TrainerCfg) -> Optimizer:
    """GRPO: :func:`group_normalised`, groups named by the recipe (MAESTRO: per slate), else :func:`same_prompt`."""
    return group_normalised(cfg, same_prompt)


def _with_kl(stats: dict, kl, loss_mask) -> dict:
    """``stats["kl"]``: the mean KL folded into the reward when there is one (else policy_update's loss-term KL,
    or 0)."""
    if kl is not None:
        stats["kl"] = float(masked_mean(kl, loss_mask))
    stats.setdefault("kl", 0.0)
    return stats
