"""CLPO — Conditional Listwise Policy Optimization (MAESTRO, paper 004, Sec. 3.3, Eq. 6-8) as the optimizer ``clpo``.

Rows are a selector's outputs; ``samples.groups`` names the slate of each row (default: rows with identical prompt
tokens), and a slate always stays in one micro-batch. Per-row ``batch.extras``:

* ``decision`` [B, T]: 1 on the decision tokens (the choice and its answer, ``Chosen: k`` … ``Final: \\boxed{}``);
  default: every completion token;
* ``rationale`` [B, T]: 1 on the justification tokens; default: none (then no L_rank);
* ``slate_mean`` [B] (optional): r̄, the mean reward of the slate's *candidates*; default: the mean of the
  group's row rewards.

With ``A = r − r̄`` (``r``: the row's reward, i.e. the reward of the candidate it endorses), per optimizer step over
whole slates S (``|S|`` slates, ``G_s`` rows of slate s with decision tokens):

* ``L_choice = 1/|S| Σ_s 1/G_s Σ_g −A_g · Σ_t decision_gt · log π_gt`` — Eq. 6 (:func:`choice_loss`), its
  sampled form: each row's decision segment is one draw of log π(k | q, C), conditioned on the row's own rationale;
* ``L_rank = 1/|S| Σ_s ListMLE(s_g; r_g)`` — Eq. 7 (:func:`listmle_loss`), ``s_g`` the length-normalised log-prob of
  the row's rationale (:func:`length_normalised_logprob`); rows are shuffled with a seed (agent, adapter version,
  slate) before ranking, so ties in reward are broken at random; a row with an empty rationale is left out, and
  a slate whose ranked rewards are all equal has L_rank = 0 (no order to learn);
* ``L_KL`` = token mean over the step's completion tokens of ``kl_estimate(log π, log π_ref)`` (the reference is
  the backbone with the adapter disabled); ``H`` = token mean of the policy's entropy at those positions;
* ``L = w_choice · L_choice + λ_rank · L_rank + λ_kl · L_KL − λ_ent · H`` — Eq. 8 (:func:`clpo_loss`);
  λ_kl is ``trainer.kl_coef`` (always a loss term here), λ_rank and λ_ent are the :class:`ClpoCfg` section's
  (``clpo.*`` of ``selfevo run maestro``), w_choice = 1 (0: the "w/o L_choice" ablation).

The terms have no importance ratio (as written in the paper), so CLPO makes one pass over each rollout
(``trainer.epochs`` must be 1: a second pass would be an uncorrected off-policy update, KL and entropy included);
the paper's "three epochs" are three passes over the training questions (``trainer.max_steps``).
``trainer.train_batch`` rows (rounded up to whole slates) per optimizer step, slates in a seeded order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import torch

from selfevo.config import ConfigError, opt
from selfevo.optimizers.base import OPTIMIZERS, Optimizer, Samples, hash_seed, score
from selfevo.optimizers.objectives import (choice_loss, clpo_loss, count_tokens, kl_loss, length_normalised_logprob,
                                           listmle_loss, slate_advantages, token_mean)
from selfevo.optimizers.trainer import TrainerCfg
from selfevo.policy import PolicyStore, SeqBatch


TERMS = ("choice", "rank", "kl", "entropy")


@dataclass
class ClpoCfg:
    lambda_rank: float = opt(0.5, "λ_rank: weight of L_rank (App. C.1 tunes it over 0.1, 0.5, 0.8, 1.0)", ge=0)
    lambda_ent: float = opt(0.01, "λ_ent: entropy bonus (App. C.1: 0.01); λ_kl is trainer.kl_coef", ge=0)
    choice: bool = opt(True, "use L_choice (false: the w/o L_choice ablation)")
    rank: bool = opt(True, "use L_rank (false: the w/o L_rank ablation)")


def choice_advantages(rewards: torch.Tensor, groups: Sequence[Hashable],
                      slate_mean: torch.Tensor | None = None) -> torch.Tensor:
    """``A = r − r̄`` per row: r̄ from ``slate_mean`` (the slate's candidates) or else the row's group mean
    (:func:`slate_advantages` over the group's rows). [B]."""
    r = rewards.float()
    if slate_mean is not None:
        return r - slate_mean.float()
    out = torch.zeros_like(r)
    for rows in _members(groups).values():
        out[rows] = slate_advantages(r[rows])
    return out


def slate_terms(logp: torch.Tensor, decision: torch.Tensor, rationale: torch.Tensor, advantages: torch.Tensor,
                rewards: torch.Tensor, order: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_choice, L_rank) of ONE slate's rows: ``logp``/masks [G, T], ``advantages``/``rewards`` [G]; ``order`` is
    the row order ListMLE sees (ties keep it). L_choice is averaged over the rows that have decision tokens; L_rank
    is 0 when the ranked rows' rewards are all equal (nothing to order: a random order of ties is pure noise)."""
    has = decision.sum(-1) > 0
    decision_logp = (logp * decision).sum(-1)
    l_choice = choice_loss(decision_logp[None], advantages[None], has[None]) / has.sum().clamp(min=1)
    idx = torch.as_tensor(list(order) if order is not None else range(logp.shape[0]), dtype=torch.long)
    scores, ranked = length_normalised_logprob(logp, rationale), rationale.sum(-1) > 0
    if len(set(rewards[ranked].tolist())) < 2:  # no order to learn (all tied, or < 2 rationales): ties would be noise
        return l_choice, (scores * 0).sum()
    return l_choice, listmle_loss(scores[idx], rewards[idx], ranked[idx], reduction="sum")


def _members(groups: Sequence[Hashable]) -> dict:
    out: dict = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


def slate_steps(groups: Sequence[int], size: int, gen: torch.Generator) -> list[list[int]]:
    """Row indices of the optimizer steps of one pass: whole slates in a seeded random order, packed until a step
    holds at least ``size`` rows (0: one step with every row, in order)."""
    members = list(_members(groups).values())
    if not size:
        return [[i for rows in members for i in rows]]
    steps, current = [], []
    for j in torch.randperm(len(members), generator=gen).tolist():
        current += members[j]
        if len(current) >= size:
            steps.append(current)
            current = []
    return steps + ([current] if current else [])


CLPO_EPOCHS = ("trainer.epochs={} with trainer.optimizer=clpo: CLPO's terms carry no importance ratio, so a second "
               "pass over a rollout would be an uncorrected off-policy update; use trainer.epochs=1 and more "
               "trainer.max_steps (the paper's three epochs are three passes over the training questions)")


@OPTIMIZERS.register("clpo")
def clpo(cfg: TrainerCfg, clpo: ClpoCfg | None = None) -> Optimizer:
    """CLPO (module doc) with the weights of the ``clpo`` section (default: :class:`ClpoCfg`'s);
    ``clpo.choice=False`` / ``clpo.rank=False`` drop L_choice / L_rank (the paper's ablations)."""
    if cfg.epochs != 1:
        raise ConfigError(CLPO_EPOCHS.format(cfg.epochs))
    clpo = clpo if clpo is not None else ClpoCfg()
    weights = {"choice": 1.0 if clpo.choice else 0.0, "rank": clpo.lambda_rank if clpo.rank else 0.0}
    lambda_ent = clpo.lambda_ent

    def update(store: PolicyStore, agent: str, samples: Samples) -> dict:
        batch = samples.batch
        keys = samples.groups if samples.groups is not None else _prompt_keys(batch)
        index = {k: i for i, k in enumerate(_members(keys))}
        gid = [index[k] for k in keys]
        extras = {"adv": choice_advantages(samples.rewards, gid, batch.extras.get("slate_mean")),
                  "reward": samples.rewards.float(), "decision": batch.extras.get("decision", batch.loss_mask),
                  "rationale": batch.extras.get("rationale", torch.zeros_like(batch.loss_mask))}
        if cfg.kl_coef:
            extras["ref"] = score(store, store.reference_of(agent), batch, store.agent_backbone[agent])
        batch = batch.with_extras(**extras).with_groups(gid)
        gen = torch.Generator().manual_seed(hash_seed(agent, store.versions[agent]))
        names = [str(k) for k in index]
        steps = [_step(store, agent, batch.rows(rows), names, weights, cfg, lambda_ent)
                 for _ in range(cfg.epochs) for rows in slate_steps(gid, cfg.train_batch, gen)]
        out = {k: sum(s[k] for s in steps) / len(steps) for k in ("loss", "grad_norm", *TERMS)}
        out.update(skipped=any(s["skipped"] for s in steps), optimizer_steps=sum(not s["skipped"] for s in steps),
                   slates=len(index), mean_advantage_abs=float(extras["adv"].abs().mean()))
        return out

    return update


def _step(store: PolicyStore, agent: str, batch: SeqBatch, names: list[str], weights: dict, cfg: TrainerCfg,
          lambda_ent: float) -> dict:
    n_tok, n_slates = count_tokens([batch.loss_mask]), len(set(batch.groups))
    parts = dict.fromkeys(TERMS, 0.0)

    def loss_fn(logp: torch.Tensor, mb: SeqBatch, entropy: torch.Tensor | None = None) -> torch.Tensor:
        x = mb.extras
        l_choice, l_rank = logp.new_zeros(()), logp.new_zeros(())
        for g, rows in _members(mb.groups).items():
            gen = torch.Generator().manual_seed(hash_seed(agent, store.versions[agent], names[g]))
            order = torch.randperm(len(rows), generator=gen).tolist()  # random tie-breaking for ListMLE
            c, r = slate_terms(logp[rows], x["decision"][rows], x["rationale"][rows], x["adv"][rows],
                               x["reward"][rows], order)
            l_choice, l_rank = l_choice + c / n_slates, l_rank + r / n_slates
        kl = kl_loss(logp, x["ref"], mb.loss_mask, cfg.kl_estimator, normaliser=n_tok) if "ref" in x else 0.0
        ent = token_mean(entropy, mb.loss_mask, n_tok) if entropy is not None else 0.0
        total = clpo_loss(weights["choice"] * l_choice, l_rank, kl, ent, lambda_rank=weights["rank"],
                          lambda_kl=cfg.kl_coef, lambda_ent=lambda_ent)
        for name, value in zip(TERMS, (l_choice, l_rank, kl, ent)):
            parts[name] += float(value.detach()) if torch.is_tensor(value) else float(value)
        return total

    stats = store.step(agent, batch, loss_fn, entropy=lambda_ent > 0)
    return {**stats, **parts}


def _prompt_keys(batch: SeqBatch) -> list[tuple]:
    """Rows with identical prompt tokens form a slate (the default grouping)."""
    return [tuple(batch.input_ids[i][(batch.attention_mask[i] > 0) & (batch.loss_mask[i] == 0)].tolist())
            for i in range(batch.input_ids.shape[0])]
