"""CLPO — Conditional Listwise Policy Optimization (MAESTRO, paper 004, Sec. 3.3, Eq. 6-8) as the optimizer ``clpo``.

Rows are a selector's outputs; ``samples.groups`` names the slate of each row (default: rows with identical prompt
tokens), and a slate always stays in one micro-batch. Per-row ``batch.extras``:

* ``decision`` [B, T]: 1 on the decision tokens (the choice and its answer, ``Chosen: k`` … ``Final: \\boxed{}``);
  default: every completion token;
* ``rationale`` [B, T]: 1 on the justification tokens; default: none (then no L_rank);
* ``slate_mean`` [B] (optional): r̄, the mean reward of the slate's *candidates*; default: the mean of the
  group's row rewards;
* ``choices`` [B, K, L] (token ids), ``choice_mask`` [B, K, L] (1 on real tokens), ``choice_reward`` [B, K, 1]
  (r(c_k)): the decision string of every candidate k of the row's slate and its reward (listwise L_choice only).

Per parameter update over whole slates S (``|S|`` slates, ``G_s`` rows of slate s with decision tokens), L_choice —
Eq. 6, ``−Σ_k A_k log π(k | q, C)`` with ``A_k = r(c_k) − r̄`` — in the form ``clpo.choice_form`` names:

* ``listwise`` (the default; as written): ``L_choice = 1/|S| Σ_s 1/G_s Σ_g −Σ_k A_k log π(d_k | q, C, ρ_g)``
  (:func:`listwise_choice`): for every row g with decision tokens, each candidate's decision string d_k is scored
  after the row's tokens up to its first decision token (the prompt and the row's rationale ρ_g) — K extra rows
  per row. With ``trainer.shared_prompts`` each slate's candidate rows run the way that runs fewer tokens
  (:func:`candidate_layout`): in the slate's micro-batch, the slate's prompt once for its rows and all their
  candidate rows (also when a chained selection's decision rows carry their rationale before the number:
  :func:`~selfevo.policy.packing.common_prefix`), or apart, each row's prompt and rationale once for its K
  candidates; the reference's scoring pass packs the rows the same way; log π(d_k | …) is the sum of d_k's token
  log-probs. Its logit gradient is −A_k's whatever π is: every candidate is pushed by its own
  advantage;
* ``sampled``: ``L_choice = 1/|S| Σ_s 1/G_s Σ_g −A_g · Σ_t decision_gt · log π_gt`` (:func:`sampled_choice`), with
  ``A_g = r_g − r̄`` (``r_g``: the row's reward, the reward of the candidate it endorses): each row's own decision
  segment is one draw of k. Its expectation is Σ_k π_k A_k ∇log π_k — Eq. 6's terms weighted by π_k, not Eq. 6's
  gradient (π = (0.1, 0.8, 0.1), r = (1, 0, 0): logit ascent (0.09, −0.08, −0.01), not (0.667, −0.333, −0.333));

and
* ``L_rank = 1/|S| Σ_s ListMLE(s_g; r_g)`` — Eq. 7 (:func:`listmle_loss`), ``s_g`` the length-normalised log-prob of
  the row's rationale (:func:`length_normalised_logprob`); rows are shuffled with a seed (agent, adapter version,
  slate) before ranking, so ties in reward are broken at random; a row with an empty rationale is left out, and
  a slate whose ranked rewards are all equal has L_rank = 0 (no order to learn);
* ``L_KL`` = token mean over the step's completion tokens of ``kl_estimate(log π, log π_ref)`` (the reference is
  the backbone with the adapter disabled); ``H`` = token mean of the policy's entropy at those positions (the
  sampled rows' tokens: the listwise candidate rows enter L_choice only);
* ``L = w_choice · L_choice + λ_rank · L_rank + λ_kl · L_KL − λ_ent · H`` — Eq. 8 (:func:`clpo_loss`);
  λ_kl is ``trainer.kl_coef`` (always a loss term here), λ_rank and λ_ent are the :class:`ClpoCfg` section's
  (``clpo.*`` of ``selfevo run maestro``), w_choice = 1 (0: the "w/o L_choice" ablation).

The terms have no importance ratio (as written in the paper), so CLPO makes one pass over each rollout
(``trainer.epochs`` must be 1: a second pass would be an uncorrected off-policy update, KL and entropy included);
the paper's "three epochs" are three passes over the training questions (``trainer.max_steps``).
``trainer.train_batch`` rows (rounded up to whole slates) per parameter update, slates in a seeded order.
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
from selfevo.policy.packing import SHARED_PREFIX, common_prefix, packed_positions, prompt_length


TERMS = ("choice", "rank", "kl", "entropy")
CHOICE_FORMS = ("listwise", "sampled")


@dataclass
class ClpoCfg:
    lambda_rank: float = opt(0.5, "λ_rank: weight of L_rank (App. C.1 tunes it over 0.1, 0.5, 0.8, 1.0)", ge=0)
    lambda_ent: float = opt(0.01, "λ_ent: entropy bonus (App. C.1: 0.01); λ_kl is trainer.kl_coef", ge=0)
    choice: bool = opt(True, "use L_choice (false: the w/o L_choice ablation)")
    rank: bool = opt(True, "use L_rank (false: the w/o L_rank ablation)")
    choice_form: str = opt("listwise", "L_choice (Eq. 6): listwise = -Σ_k A_k log π(k | q, C) over every candidate "
                                       "of the slate, each candidate's decision scored after each sample's "
                                       "rationale (as written); sampled = each sample's own decision, -A log π "
                                       "(expectation: Σ_k π_k A_k ∇log π_k)", choices=CHOICE_FORMS)


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


def listwise_choice(choice_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L_choice of ONE slate as Eq. 6 writes it: ``1/G Σ_g −Σ_k A_k log π(d_k | q, C, ρ_g)``.

    ``choice_logp`` [G, K]: log-prob of candidate k's decision string after rationale g; ``advantages`` [K] (or
    [G, K]): ``A_k = r(c_k) − r̄``; ``mask`` [G, K]: 1 where scored. G counts the rationales with at least one scored
    candidate (none: 0). With every decision one token of a shared softmax, the gradient on logit k is −A_k."""
    has = mask.bool().any(-1)
    per_rationale = choice_loss(choice_logp, advantages.expand_as(choice_logp), mask)  # mean over all G rows
    return per_rationale * choice_logp.shape[0] / has.sum().clamp(min=1)


def sampled_choice(decision_logp: torch.Tensor, advantages: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """L_choice of ONE slate, sampled form: ``1/G Σ_g −A_g log π(d_g | q, C, ρ_g)`` over the G rows that made a
    decision (``has`` [G]); ``decision_logp`` [G]: the row's own decision segment, ``advantages`` [G]: A of the
    candidate it endorses. One row per candidate k drawn with probability π_k gives, in expectation, the gradient
    Σ_k π_k (−A_k ∇log π_k): Eq. 6's terms weighted by π_k."""
    return choice_loss(decision_logp[None], advantages[None], has[None]) / has.sum().clamp(min=1)


def slate_terms(logp: torch.Tensor, decision: torch.Tensor, rationale: torch.Tensor, advantages: torch.Tensor,
                rewards: torch.Tensor, order: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sampled L_choice, L_rank) of ONE slate's rows: ``logp``/masks [G, T], ``advantages``/``rewards`` [G];
    ``order`` is the row order ListMLE sees (ties keep it). L_choice (:func:`sampled_choice`) is averaged over the
    rows that have decision tokens; L_rank is 0 when the ranked rows' rewards are all equal (nothing to order: a
    random order of ties is pure noise)."""
    has = decision.sum(-1) > 0
    l_choice = sampled_choice((logp * decision).sum(-1), advantages, has)
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
    """Row indices of the parameter updates of one pass: whole slates in a seeded random order, packed until a step
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


ROW_MASKS = ("decision", "rationale", "slate_mean")  # the per-row extras every CLPO update reads (module doc)
CHOICE_EXTRAS = ("choices", "choice_mask", "choice_reward")  # and the listwise L_choice's candidate decisions


def candidate_rows(batch: SeqBatch, slates: Sequence[int], pad_id: int = 0) -> SeqBatch:
    """The rows of the listwise L_choice: for each row with decision tokens and candidate decisions (extras
    ``choices`` / ``choice_mask`` [B, K, L], ``choice_reward`` [B, K, 1]), one row per candidate k: the row's tokens
    before its first decision token (the prompt and the row's rationale), then candidate k's decision tokens (the
    scored ones). Extras per new row: ``choice_adv`` (A_k = r(c_k) − mean over the row's candidates), ``parent`` (the
    row's index) and ``choice_weight`` (1/G_s, G_s: the rows of its slate, from ``slates``, that get candidate
    rows); every other [B] extra is the parent row's (its sampling temperature, at which the store scores it). A
    batch with no such row gives a batch of 0 rows."""
    x = batch.extras
    missing = [k for k in ("decision", *CHOICE_EXTRAS) if k not in x]
    if missing:
        raise ValueError(f"clpo.choice_form=listwise needs every row's candidate decisions: no extras {missing} "
                         f"(the maestro recipe gives them; else use clpo.choice_form=sampled)")
    prompts, comps, adv, parent = [], [], [], []
    for b in range(batch.input_ids.shape[0]):
        decided = torch.nonzero(x["decision"][b] > 0).flatten()
        real = x["choice_mask"][b] > 0  # [K, L]
        shown = real.any(-1)
        if not len(decided) or not bool(shown.any()):
            continue
        a = slate_advantages(x["choice_reward"][b, :, 0], shown)
        for k in torch.nonzero(shown).flatten().tolist():
            prompts.append(batch.input_ids[b, :int(decided[0])].tolist())
            comps.append(x["choices"][b, k][real[k]].tolist())
            adv.append(float(a[k]))
            parent.append(b)
    per_slate = {g: len({p for p in parent if slates[p] == g}) for g in {slates[p] for p in parent}}
    if not prompts:
        empty = torch.zeros(0, 1, dtype=torch.long)
        return SeqBatch(empty, empty.clone(), torch.zeros(0, 1),
                        {k: torch.zeros(0) for k in ("choice_adv", "parent", "choice_weight")})
    out = SeqBatch.build(prompts, comps, pad_id)
    out = out.with_extras(**{k: v[parent] for k, v in x.items() if v.dim() == 1})
    return out.with_extras(choice_adv=torch.tensor(adv), parent=torch.tensor(parent, dtype=torch.float32),
                           choice_weight=torch.tensor([1.0 / per_slate[slates[p]] for p in parent]))


def apart_groups(parents: Sequence[int]) -> list:
    """The groups of candidate rows run apart from their slate: each row's K candidate rows together."""
    return [("candidates of", int(p)) for p in parents]


def candidate_layout(batch: SeqBatch, choices: SeqBatch, slates: Sequence[int], micro_batch: int,
                     share_slate_prefix: bool = True) -> tuple[torch.Tensor, torch.Tensor, list]:
    """How the update runs the candidate rows (``choices``, from :func:`candidate_rows`) of ``batch``'s rows under
    ``trainer.shared_prompts``: per slate (``slates``: each row's), the layout whose packed forwards run fewer token
    positions (:func:`~selfevo.policy.packing.pack_shared_prompts`: padding and its cap included):

    * with the slate: in the slate's micro-batch, sharing with its rows each row's prompt
      (:data:`~selfevo.policy.packing.SHARED_PREFIX`): the prompt once, each rationale again per candidate;
    * with the slate, sharing the slate's prefix (:func:`~selfevo.policy.packing.common_prefix`;
      ``share_slate_prefix``): the slate's rows and all their candidate rows share the tokens the slate's rows
      have in common, so rows whose prompts differ after it share it too (a chained selection's rationale rows,
      its decision rows and their candidates);
    * apart: each row's K candidate rows kept together in micro-batches of ``micro_batch`` rows of their own,
      sharing the row's prompt and rationale: the prompt again per row, cheaper when rationales are long beside it.

    Returns the SHARED_PREFIX of ``batch``'s rows and of the candidate rows, and the candidate rows' groups (the
    slate's key, or ``("candidates of", parent row)``). A tie keeps them apart, then with each row's prompt."""
    prompts = torch.tensor(prompt_length(batch.attention_mask, batch.loss_mask), dtype=torch.float32)
    own, prefixes = prompts.clone(), torch.tensor(prompt_length(choices.attention_mask, choices.loss_mask),
                                                   dtype=torch.float32)
    parent = [int(p) for p in choices.extras["parent"].tolist()]
    groups = apart_groups(parent)
    bare = SeqBatch(batch.input_ids, batch.attention_mask, batch.loss_mask)
    bare_choices = SeqBatch(choices.input_ids, choices.attention_mask, choices.loss_mask)

    def positions(rows: SeqBatch, shared: torch.Tensor | None = None) -> int:
        return packed_positions(rows.input_ids, rows.attention_mask, rows.loss_mask, shared)

    for g in dict.fromkeys(slates):
        rows = [i for i, s in enumerate(slates) if s == g]
        mine = [j for j, p in enumerate(parent) if slates[p] == g]
        if not mine:
            continue
        together = join(bare.rows(rows), bare_choices.rows(mine))
        by_row = torch.cat([prompts[rows], prompts[[parent[j] for j in mine]]])
        apart = positions(bare.rows(rows)) + sum(positions(mb) for mb in bare_choices.rows(mine).with_groups(
            [parent[j] for j in mine]).micro_batches(micro_batch))
        best, shared = apart, None
        if (n := positions(together, by_row)) < best:
            best, shared = n, by_row
        common = common_prefix(bare.input_ids, rows, prompts.long().tolist()) if share_slate_prefix else 0
        if 0 < common < int(by_row.max()) and (n := positions(together, torch.full_like(by_row, common))) < best:
            best, shared = n, torch.full_like(by_row, common)
        if shared is not None:
            own[rows] = shared[:len(rows)]
            for j, value in zip(mine, shared[len(rows):].tolist()):
                prefixes[j], groups[j] = value, g
    return own, prefixes, groups


def join(a: SeqBatch, b: SeqBatch) -> SeqBatch:
    """``a``'s rows then ``b``'s, right-padded to the wider; an extra one side lacks is 0 on that side's rows
    ([B] and [B, T] extras; groups: both sides' keys)."""
    width = max(a.input_ids.shape[1], b.input_ids.shape[1])

    def pad(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1])) if t.dim() == 2 else t

    def extra(batch: SeqBatch, name: str, like: torch.Tensor) -> torch.Tensor:
        if name in batch.extras:
            return pad(batch.extras[name])
        rows = batch.input_ids.shape[0]
        return torch.zeros((rows, width) if like.dim() == 2 else (rows,), dtype=like.dtype)

    names = {**b.extras, **a.extras}
    extras = {k: torch.cat([extra(a, k, v), extra(b, k, v)]) for k, v in names.items()}
    groups = None if a.groups is None or b.groups is None else [*a.groups, *b.groups]
    return SeqBatch(torch.cat([pad(a.input_ids), pad(b.input_ids)]), torch.cat([pad(a.attention_mask),
                    pad(b.attention_mask)]), torch.cat([pad(a.loss_mask), pad(b.loss_mask)]), extras, groups)


CLPO_EPOCHS = ("trainer.epochs={} with trainer.optimizer=clpo: CLPO's terms carry no importance ratio, so a second "
               "pass over a rollout would be an uncorrected off-policy update; use trainer.epochs=1 and more "
               "trainer.max_steps (the paper's three epochs are three passes over the training questions)")


@OPTIMIZERS.register("clpo")
def clpo(cfg: TrainerCfg, clpo: ClpoCfg | None = None) -> Optimizer:
    """CLPO (module doc) with the weights of the ``clpo`` section (default: :class:`ClpoCfg`'s);
    ``clpo.choice=False`` / ``clpo.rank=False`` drop L_choice / L_rank (the paper's ablations; not both);
    ``clpo.choice_form`` picks Eq. 6's listwise form (the default) or its sampled form. The optimizer's
    ``row_extras``: :data:`ROW_MASKS`, and :data:`CHOICE_EXTRAS` for the listwise form."""
    if cfg.epochs != 1:
        raise ConfigError(CLPO_EPOCHS.format(cfg.epochs))
    clpo = clpo if clpo is not None else ClpoCfg()
    if not (clpo.choice or clpo.rank):
        raise ConfigError("clpo.choice and clpo.rank are both false: CLPO would train nothing but KL/entropy")
    weights = {"choice": 1.0 if clpo.choice else 0.0, "rank": clpo.lambda_rank if clpo.rank else 0.0}
    lambda_ent = clpo.lambda_ent
    listwise = clpo.choice_form == "listwise" and clpo.choice

    def update(store: PolicyStore, agent: str, samples: Samples) -> dict:
        batch = samples.batch
        keys = samples.groups if samples.groups is not None else _prompt_keys(batch)
        index = {k: i for i, k in enumerate(_members(keys))}
        gid = [index[k] for k in keys]
        extras = {"adv": choice_advantages(samples.rewards, gid, batch.extras.get("slate_mean")),
                  "reward": samples.rewards.float(), "decision": batch.extras.get("decision", batch.loss_mask),
                  "rationale": batch.extras.get("rationale", torch.zeros_like(batch.loss_mask))}
        pad = store.tokenizer(agent).pad_token_id or 0
        choices = candidate_rows(batch.with_extras(**extras), gid, pad) if listwise else None
        if choices is not None and choices.input_ids.shape[0]:  # how the update runs them (candidate_layout)
            if store.settings.shared_prompts:
                extras[SHARED_PREFIX], prefixes, groups = candidate_layout(batch, choices, gid,
                                                                           store.settings.micro_batch)
                choices = choices.with_extras(**{SHARED_PREFIX: prefixes}).with_groups(groups)
            else:
                choices = choices.with_groups(apart_groups(choices.extras["parent"].tolist()))
        if cfg.kl_coef:  # the reference scores the rows packed as the update runs them
            shared = {SHARED_PREFIX: extras[SHARED_PREFIX]} if SHARED_PREFIX in extras else {}
            extras["ref"] = score(store, store.reference_of(agent), batch.with_extras(**shared),
                                  store.agent_backbone[agent])
        batch = SeqBatch(batch.input_ids, batch.attention_mask, batch.loss_mask,
                         {k: v for k, v in batch.extras.items() if k not in CHOICE_EXTRAS}, batch.groups)
        batch = batch.with_extras(**extras).with_groups(gid)
        gen = torch.Generator().manual_seed(hash_seed(agent, store.versions[agent]))
        names = [str(k) for k in index]
        steps = [_step(store, agent, batch.rows(rows), names, weights, cfg, lambda_ent, _of_rows(choices, rows))
                 for _ in range(cfg.epochs) for rows in slate_steps(gid, cfg.train_batch, gen)]
        out = {k: sum(s[k] for s in steps) / len(steps) for k in ("loss", "grad_norm", *TERMS)}
        out.update(skipped=any(s["skipped"] for s in steps), parameter_updates=sum(not s["skipped"] for s in steps),
                   slates=len(index), mean_advantage_abs=float(extras["adv"].abs().mean()))
        if choices is not None:
            out["choice_rows"] = int(choices.input_ids.shape[0])
        return out

    return Optimizer(update, row_extras=frozenset(ROW_MASKS + (CHOICE_EXTRAS if listwise else ())))


def _of_rows(choices: SeqBatch | None, rows: list[int]) -> SeqBatch | None:
    """The candidate rows whose parent is one of ``rows`` (renumbered to their place in ``rows``; their groups kept:
    :func:`candidate_layout`); None: none."""
    if choices is None:
        return None
    place = {r: i for i, r in enumerate(rows)}
    mine = [j for j, p in enumerate(choices.extras["parent"].long().tolist()) if p in place]
    if not mine:
        return None
    out = choices.rows(mine)
    return out.with_extras(parent=torch.tensor([float(place[p]) for p in out.extras["parent"].long().tolist()]))


def _step(store: PolicyStore, agent: str, batch: SeqBatch, names: list[str], weights: dict, cfg: TrainerCfg,
          lambda_ent: float, choices: SeqBatch | None = None) -> dict:
    """One parameter update over whole slates (``batch``) and, for the listwise L_choice, their rows' candidate rows
    (``choices``, grouped with their slate or apart as :func:`candidate_layout` says; they enter L_choice only)."""
    n_tok, n_slates = count_tokens([batch.loss_mask]), len(set(batch.groups))
    listwise = choices is not None
    if listwise:
        batch = join(batch.with_extras(candidate=torch.zeros(batch.input_ids.shape[0])),
                     choices.with_extras(candidate=torch.ones(choices.input_ids.shape[0])))
    parts = dict.fromkeys(TERMS, 0.0)

    def loss_fn(logp: torch.Tensor, mb: SeqBatch, entropy: torch.Tensor | None = None) -> torch.Tensor:
        x = mb.extras
        own = mb.loss_mask * (1 - x["candidate"])[:, None] if listwise else mb.loss_mask  # the sampled rows' tokens
        l_choice, l_rank = logp.new_zeros(()), logp.new_zeros(())
        for g, rows in _members(mb.groups).items():
            if listwise:  # the slate's candidate rows, one row's K at a time: the listwise L_choice
                cand = [r for r in rows if x["candidate"][r] > 0]
                rows = [r for r in rows if x["candidate"][r] == 0]
                for of_row in _members([int(x["parent"][r]) for r in cand]).values():
                    k = [cand[i] for i in of_row]
                    seq = (logp[k] * mb.loss_mask[k]).sum(-1)
                    l_choice = l_choice + listwise_choice(seq[None], x["choice_adv"][k], torch.ones_like(seq)[None]) \
                        * x["choice_weight"][k[0]] / n_slates
                if not rows:  # candidate rows run apart from their slate
                    continue
            gen = torch.Generator().manual_seed(hash_seed(agent, store.versions[agent], names[g]))
            order = torch.randperm(len(rows), generator=gen).tolist()  # random tie-breaking for ListMLE
            c, r = slate_terms(logp[rows], x["decision"][rows], x["rationale"][rows], x["adv"][rows],
                               x["reward"][rows], order)
            l_choice = l_choice if listwise else l_choice + c / n_slates
            l_rank = l_rank + r / n_slates
        kl = kl_loss(logp, x["ref"], own, cfg.kl_estimator, normaliser=n_tok) if "ref" in x else 0.0
        ent = token_mean(entropy, own, n_tok) if entropy is not None else 0.0
        total = clpo_loss(weights["choice"] * l_choice, l_rank, kl, ent, lambda_rank=weights["rank"],
                          lambda_kl=cfg.kl_coef, lambda_ent=lambda_ent)
        for name, value in zip(TERMS, (l_choice, l_rank, kl, ent)):
            parts[name] += float(value.detach()) if torch.is_tensor(value) else float(value)
        return total

    stats = store.update(agent, batch, loss_fn, entropy=lambda_ent > 0)
    return {**stats, **parts}


def _prompt_keys(batch: SeqBatch) -> list[tuple]:
    """Rows with identical prompt tokens form a slate (the default grouping)."""
    return [tuple(batch.input_ids[i][(batch.attention_mask[i] > 0) & (batch.loss_mask[i] == 0)].tolist())
            for i in range(batch.input_ids.shape[0])]
