"""Policy-gradient objectives as pure functions over torch tensors (no model inside).

Shapes: ``B`` sequences, ``T`` completion positions. ``mask`` is 1 on completion tokens that count (float or bool),
0 on padding / prompt / masked-out tokens. Per-token quantities are ``[B, T]``, sequence quantities ``[B]``.

Sources (papers under ``/work/shared/papers``, notes under ``/work/shared/research``):

* CoMAS (arXiv 2510.08529) Sec. 3.3: Eq. 9 (KL folded into the reward), Eq. 10 (batch whitening),
  Eq. 11 (PPO-clip surrogate). REINFORCE++ (Hu et al., arXiv 2501.03262) as run in OpenRLHF.
* SAGE (arXiv 2603.15255) Sec. 3 Eq. 1: Task-Relative REINFORCE++ (per-role normalisation, from AZR).
* MAESTRO (arXiv 2511.06134) Sec. 3.3: CLPO, Eq. 6 (choice loss), Eq. 7 (ListMLE over rationales), Eq. 8 (total).

Conventions chosen here (where the papers leave it open):

* "Std" is the population standard deviation (divide by n, ``ddof=0``) unless ``unbiased=True``; the
  normalisation is ``(x - mean) / (std + eps)`` as written in CoMAS Eq. 10 / SAGE Eq. 1. OpenRLHF uses
  ``(x - mean) * rsqrt(max(var, 1e-8))`` and verl a Bessel-corrected variance; they differ only for tiny ``std``.
* A group (or batch) with fewer than two counted entries gets advantage 0 (it carries no relative signal).
"""
from __future__ import annotations

import math
from typing import Hashable, Sequence

import torch

Tensor = torch.Tensor

__all__ = [
    "kl_k1", "kl_k2", "kl_k3", "kl_estimate",
    "masked_mean", "masked_whiten", "group_whiten",
    "kl_penalised_returns", "reinforce_pp_advantages", "task_relative_advantages",
    "ppo_clip_loss", "LOSS_AGG", "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "aggregate_loss",
    "count_tokens", "count_sequences", "step_normaliser",
    "kl_loss", "entropy_from_logits",
    "length_normalised_logprob", "slate_advantages", "listmle_loss", "choice_loss", "clpo_loss",
]


# --------------------------------------------------------------------------------------------------------------
# 1. KL estimators (Schulman's k1/k2/k3), per token
# --------------------------------------------------------------------------------------------------------------

def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = log pi(o_t) - log pi_ref(o_t): the per-token term summed in CoMAS Eq. 9 (unbiased, can be negative)."""
    return logp.float() - ref_logp.float()


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = 0.5 * (log pi - log pi_ref)^2: non-negative, biased; its gradient is the KL gradient (REINFORCE++ paper)."""
    d = logp.float() - ref_logp.float()
    return 0.5 * d * d


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1: non-negative, unbiased for KL(pi || pi_ref) under samples of pi."""
    d = ref_logp.float() - logp.float()
    return torch.exp(d) - d - 1.0


_KL = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: str = "k1", clamp: float | None = None) -> Tensor:
    """Per-token KL by name (``"k1" | "k2" | "k3"``); ``clamp`` bounds the value to [-clamp, clamp] (OpenRLHF: 10)."""
    if estimator not in _KL:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {sorted(_KL)}")
    kl = _KL[estimator](logp, ref_logp)
    return kl if clamp is None else kl.clamp(-clamp, clamp)


# --------------------------------------------------------------------------------------------------------------
# 2. Advantages: REINFORCE++ (CoMAS Eq. 9-10), group / Task-Relative normalisation (SAGE Eq. 1)
# --------------------------------------------------------------------------------------------------------------

def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over entries where ``mask`` is 1; an empty selection gives 0 (not NaN)."""
    m = mask.to(values.dtype)
    if dim is None:
        return (values * m).sum() / m.sum().clamp(min=1)
    return (values * m).sum(dim) / m.sum(dim).clamp(min=1)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8, unbiased: bool = False,
                  shift_mean: bool = True, scale: bool = True) -> Tensor:
    """CoMAS Eq. 10: ``(A - mean) / (std + eps)`` with mean/std over the masked entries; output 0 where mask is 0.

    Fewer than two masked entries -> all zeros. ``scale=False`` only centres (OpenRLHF ``no_std_norm``);
    ``shift_mean=False`` only scales. The statistics are computed in float64, and a spread below the input dtype's
    precision (std ≤ 4 ulp of the largest |value|) counts as none: equal rewards give exactly 0, never rounding
    noise divided by a tiny std (seven float32 rewards of 1/3 would otherwise get advantages of ±0.4-0.9).
    """
    m = mask.to(torch.float64)
    n = m.sum()
    if n < 2:
        return torch.zeros_like(values)
    v = values.to(torch.float64)
    mean = (v * m).sum() / n
    var = (((v - mean) * m) ** 2).sum() / (n - 1 if unbiased else n)
    std = var.sqrt()
    if scale and std <= _precision(values, m):
        return torch.zeros_like(values)
    out = v - mean if shift_mean else v
    if scale:
        out = out / (std + eps)
    return (out * m).to(values.dtype)


def _precision(values: Tensor, mask: Tensor) -> float:
    """4 ulp of the largest masked |value| in ``values``' own dtype: spreads below this are rounding noise."""
    dtype = values.dtype if values.dtype.is_floating_point else torch.float32
    top = float((values.to(torch.float64).abs() * mask).max())
    return 4 * torch.finfo(dtype).eps * top


def _group_index(group_ids: Sequence[Hashable] | Tensor, n: int) -> list[list[int]]:
    """Row indices per distinct group key, in order of first appearance."""
    keys = group_ids.tolist() if isinstance(group_ids, Tensor) else list(group_ids)
    if len(keys) != n:
        raise ValueError(f"got {len(keys)} group ids for {n} rows")
    groups: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k if not isinstance(k, list) else tuple(k), []).append(i)
    return list(groups.values())


def group_whiten(values: Tensor, mask: Tensor | None, group_ids: Sequence[Hashable] | Tensor,
                 eps: float = 1e-8, unbiased: bool = False, scale: bool = True) -> Tensor:
    """Whiten ``values`` separately inside each group (per agent, per role, per (role, task), ...).

    ``values`` is ``[B]`` (sequence-level: per-sample statistics) or ``[B, T]`` (token-level: statistics over the
    group's masked tokens, i.e. token-weighted as in AZR's per-batch whitening); ``group_ids`` has one key per row.
    Inside a group: ``(v - mean_g) / (std_g + eps)`` over masked entries (population std unless ``unbiased``);
    groups with fewer than two masked entries, and masked entries, get 0. This is the per-role fix for the CoMAS
    scorer-reward flaw (DESIGN.md Sec. 4) and Task-Relative REINFORCE++ (SAGE Eq. 1) when ``values`` are rewards.
    """
    mask = torch.ones_like(values) if mask is None else mask.to(values.dtype)
    out = torch.zeros_like(values)
    for rows in _group_index(group_ids, values.shape[0]):
        idx = torch.tensor(rows, device=values.device)
        out[idx] = masked_whiten(values[idx], mask[idx], eps=eps, unbiased=unbiased, scale=scale)
    return out


def kl_penalised_returns(rewards: Tensor, kl: Tensor | None, mask: Tensor, beta: float = 0.0,
                         gamma: float = 1.0) -> Tensor:
    """Returns ``G_t = sum_{k>=t} gamma^(k-t) R_k`` of the REINFORCE++ token rewards (CoMAS Eq. 9 for gamma=1).

    Token reward ``R_t = -beta * kl_t`` on every completion token, plus the scalar ``rewards[b]`` on the row's last
    completion token (last position with mask 1). With gamma=1 this is ``r - beta * sum_{l>=t} kl_l``.
    Rows with an empty mask get all-zero returns; the output is 0 off the mask. Accumulated and returned in float64
    (the whitening's precision): a float32 sum over a long completion's KL terms would carry ~1e-4 of rounding into
    the advantages.
    """
    m = mask.to(torch.float64)
    B, T = m.shape
    tok = torch.zeros_like(m) if (kl is None or beta == 0) else -beta * kl.to(torch.float64) * m
    has_any = m.sum(-1) > 0
    last = (m * torch.arange(1, T + 1, device=m.device, dtype=m.dtype)).argmax(-1)  # last index with mask 1
    rows = torch.nonzero(has_any).flatten()
    tok[rows, last[rows]] += torch.as_tensor(rewards, device=m.device).to(torch.float64)[rows]
    if gamma == 1.0:
        ret = tok.flip(-1).cumsum(-1).flip(-1)
    else:
        ret, run = torch.zeros_like(tok), torch.zeros(B, device=m.device, dtype=torch.float64)
        for t in range(T - 1, -1, -1):
            run = tok[:, t] + gamma * run
            ret[:, t] = run
    return ret * m


def reinforce_pp_advantages(rewards: Tensor, kl: Tensor | None, mask: Tensor, beta: float = 0.0,
                            gamma: float = 1.0, whiten: bool = True, eps: float = 1e-8,
                            group_ids: Sequence[Hashable] | Tensor | None = None) -> Tensor:
    """REINFORCE++ token advantages (OpenRLHF ``reinforce`` estimator; CoMAS Eq. 9 then Eq. 10).

    ``A_t = r - beta * sum_{l>=t} kl_l`` (see :func:`kl_penalised_returns`), then, if ``whiten``, normalised over
    all masked tokens of the batch (token-weighted, population std, ``(A - mean) / (std + eps)``). Pass
    ``group_ids`` (one per row, e.g. the role) to whiten per group instead of over the whole batch.
    Inputs: ``rewards [B]``, ``kl [B, T]`` (or None), ``mask [B, T]``. Output ``[B, T]`` float32, 0 off the mask;
    returns and whitening run in float64.
    """
    adv = kl_penalised_returns(rewards, kl, mask, beta=beta, gamma=gamma)
    if whiten:
        adv = masked_whiten(adv, mask, eps=eps) if group_ids is None else group_whiten(adv, mask, group_ids, eps=eps)
    return adv.to(torch.float32)


def task_relative_advantages(rewards: Tensor | Sequence[float], group_keys: Sequence[Hashable] | Tensor,
                             eps: float = 1e-6, unbiased: bool = False) -> Tensor:
    """Task-Relative REINFORCE++ (SAGE Eq. 1, from AZR): ``A_i = (r_i - mu_g) / (sigma_g + eps)`` per group.

    ``group_keys`` is the role (or ``(role, task)``) of each sample. mu/sigma are per-sample statistics of the
    group in this batch; sigma is the population std (ddof=0) unless ``unbiased``. Singleton groups and constant
    groups get advantage 0. Returns ``[N]`` sequence-level advantages, to be broadcast over completion tokens.
    """
    r = torch.as_tensor(rewards, dtype=torch.float32)
    return group_whiten(r, None, group_keys, eps=eps, unbiased=unbiased)


# --------------------------------------------------------------------------------------------------------------
# 3. PPO-clip policy loss (CoMAS Eq. 11)
# --------------------------------------------------------------------------------------------------------------

def ppo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor | None = None,
                  eps_low: float = 0.2, eps_high: float | None = None,
                  max_log_ratio: float = 20.0) -> tuple[Tensor, Tensor]:
    """Per-token PPO-clip loss ``-min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)`` (CoMAS Eq. 11).

    ``rho = exp(logp - old_logp)`` with the log-ratio clamped to +-``max_log_ratio`` for overflow safety.
    ``advantages`` is ``[B, T]`` or ``[B]`` (broadcast over tokens). ``eps_high`` defaults to ``eps_low``.
    Returns ``(loss [B, T], clip_frac)``; clip_frac = share of masked tokens whose gradient the clip removes
    (rho < 1 - eps_low with A < 0, or rho > 1 + eps_high with A > 0); 0 when nothing is masked in.
    """
    eps_high = eps_low if eps_high is None else eps_high
    adv = advantages.unsqueeze(-1) if advantages.dim() == logp.dim() - 1 else advantages
    adv = adv.float()
    ratio = torch.exp((logp.float() - old_logp.float()).clamp(-max_log_ratio, max_log_ratio))
    surr1 = ratio * adv
    surr2 = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    loss = -torch.min(surr1, surr2)
    clipped = ((ratio < 1.0 - eps_low) & (adv < 0)) | ((ratio > 1.0 + eps_high) & (adv > 0))
    m = torch.ones_like(loss) if mask is None else mask.to(loss.dtype)
    clip_frac = masked_mean(clipped.to(loss.dtype), m).detach()
    return loss, clip_frac


# --------------------------------------------------------------------------------------------------------------
# 4. Loss aggregation
# --------------------------------------------------------------------------------------------------------------

LOSS_AGG = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum")  # the modes of :func:`aggregate_loss`


def count_tokens(masks: Sequence[Tensor]) -> float:
    """Total masked tokens over the micro-batches of one parameter update: the global ``normaliser`` for token_mean."""
    return float(sum(m.float().sum().item() for m in masks))


def count_sequences(masks: Sequence[Tensor]) -> float:
    """Non-empty sequences over the micro-batches of one step: the global ``num_seqs`` of the sequence modes."""
    return float(sum((m.float().sum(-1) > 0).sum().item() for m in masks))


def step_normaliser(masks: Sequence[Tensor], mode: str) -> float:
    """The global normaliser of one parameter update for :func:`aggregate_loss`'s ``mode``: its masked tokens for
    ``token_mean``, its non-empty sequences for the sequence modes."""
    if mode not in LOSS_AGG:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {', '.join(LOSS_AGG)}")
    return count_tokens(masks) if mode == "token_mean" else count_sequences(masks)


def token_mean(loss: Tensor, mask: Tensor, normaliser: float | Tensor | None = None) -> Tensor:
    """``sum(loss * mask) / max(normaliser, 1)``; normaliser defaults to this batch's token count.

    To split one parameter update into micro-batches, pass the step's total token count
    (:func:`count_tokens`) as ``normaliser`` to every micro-batch and *sum* (do not average) their losses /
    accumulate their gradients: the total equals the token mean over the concatenated step (OpenRLHF/verl
    ``token-mean``). An all-masked batch gives 0 and keeps the autograd graph.
    """
    m = mask.to(loss.dtype)
    if normaliser is None:
        normaliser = m.sum()
    normaliser = torch.as_tensor(normaliser, dtype=loss.dtype, device=loss.device).clamp(min=1)
    return (loss * m).sum() / normaliser


def _sequence_mean(per_seq: Tensor, m: Tensor, num_seqs: float | Tensor | None) -> Tensor:
    """``sum(per_seq) / max(num_seqs, 1)``; num_seqs defaults to the rows of ``m`` with a masked token."""
    if num_seqs is None:
        num_seqs = (m.sum(-1) > 0).sum()
    num_seqs = torch.as_tensor(num_seqs, dtype=per_seq.dtype, device=per_seq.device).clamp(min=1)
    return per_seq.sum() / num_seqs


def seq_mean_token_mean(loss: Tensor, mask: Tensor, num_seqs: float | Tensor | None = None) -> Tensor:
    """Mean over sequences of each sequence's token mean: DeepSeekMath Eq. 3's ``1/G Σ_i 1/|o_i| Σ_t`` (verl
    ``seq-mean-token-mean``, TRL ``loss_type="grpo"``).

    Sequences with no masked token are skipped. ``num_seqs`` plays the role of token_mean's global normaliser:
    pass the step's count of non-empty sequences (:func:`count_sequences`) and sum the micro-batch losses.
    """
    m = mask.to(loss.dtype)
    return _sequence_mean((loss * m).sum(-1) / m.sum(-1).clamp(min=1), m, num_seqs)


def seq_mean_token_sum(loss: Tensor, mask: Tensor, num_seqs: float | Tensor | None = None) -> Tensor:
    """Mean over sequences of each sequence's token *sum* (verl ``seq-mean-token-sum``): a sequence's weight grows
    with its length. ``num_seqs`` as in :func:`seq_mean_token_mean`."""
    m = mask.to(loss.dtype)
    return _sequence_mean((loss * m).sum(-1), m, num_seqs)


def aggregate_loss(loss: Tensor, mask: Tensor, mode: str = "token_mean",
                   normaliser: float | Tensor | None = None) -> Tensor:
    """Per-token ``loss`` [B, T] to one number, by ``mode`` (:data:`LOSS_AGG`; ``trainer.loss_agg``):

    * ``token_mean``: ``Σ_i Σ_t l_it / Σ_i |o_i|`` — every token weighs the same (DAPO, Dr. GRPO; OpenRLHF and verl's
      default, TRL ``loss_type="dapo"``);
    * ``seq_mean_token_mean``: ``1/G Σ_i 1/|o_i| Σ_t l_it`` — every sequence weighs the same (DeepSeekMath Eq. 3);
    * ``seq_mean_token_sum``: ``1/G Σ_i Σ_t l_it``.

    ``normaliser``: the step's token count (token_mean) or non-empty sequence count (the others), from
    :func:`step_normaliser`, so that micro-batch losses add up to the step's; None: this batch's own.
    """
    if mode == "token_mean":
        return token_mean(loss, mask, normaliser)
    if mode == "seq_mean_token_mean":
        return seq_mean_token_mean(loss, mask, normaliser)
    if mode == "seq_mean_token_sum":
        return seq_mean_token_sum(loss, mask, normaliser)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {', '.join(LOSS_AGG)}")


# --------------------------------------------------------------------------------------------------------------
# 5. KL loss term, entropy
# --------------------------------------------------------------------------------------------------------------

def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3", mode: str = "token_mean",
            normaliser: float | Tensor | None = None, clamp: float | None = None) -> Tensor:
    """KL to the reference as a loss term (GRPO / REINFORCE++-baseline style, CLPO's ``L_KL`` in MAESTRO Eq. 8).

    Per-token :func:`kl_estimate` from the *current* policy's ``logp`` aggregated like the policy loss; the caller
    multiplies by its coefficient. Use this *instead of* folding KL into the reward, not in addition.
    """
    return aggregate_loss(kl_estimate(logp, ref_logp, estimator, clamp), mask, mode, normaliser)


def entropy_from_logits(logits: Tensor, chunk_size: int = 128) -> Tensor:
    """Entropy ``H = logsumexp(z) - sum_v softmax(z)_v z_v`` of each position's distribution, shape ``logits[..., :-1]``.

    Logits of -inf (filtered tokens) contribute 0. Computed in float32 over chunks of ``chunk_size`` rows (of the flattened leading dims) to bound the extra
    memory to one chunk's ``[chunk, V]``; differentiable (MAESTRO Eq. 8 entropy bonus).
    """
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for start in range(0, flat.shape[0], chunk_size):
        z = flat[start:start + chunk_size].float()
        lse = torch.logsumexp(z, dim=-1)
        z_fin = z.masked_fill(torch.isneginf(z), 0.0)  # p = 0 there; avoids 0 * -inf = NaN (filtered vocab)
        parts.append(lse - (torch.softmax(z, dim=-1) * z_fin).sum(-1))
    out = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)
    return out.reshape(logits.shape[:-1])


# --------------------------------------------------------------------------------------------------------------
# 6. CLPO (MAESTRO Sec. 3.3)
# --------------------------------------------------------------------------------------------------------------

def length_normalised_logprob(token_logp: Tensor, mask: Tensor) -> Tensor:
    """Rationale score ``s_k = (1/L_k) sum_tau log pi(y_{k,tau} | ...)`` (MAESTRO Eq. 7) over masked tokens.

    ``token_logp``/``mask``: ``[..., T]`` -> ``[...]``. An empty rationale (L_k = 0) scores 0; exclude it from
    :func:`listmle_loss` with its ``mask`` argument.
    """
    m = mask.to(token_logp.dtype)
    return (token_logp * m).sum(-1) / m.sum(-1).clamp(min=1)


def slate_advantages(rewards: Tensor, mask: Tensor | None = None) -> Tensor:
    """CLPO choice advantage ``A_k = r(c_k) - mean_j r(c_j)`` over the slate (last dim; MAESTRO Eq. 6).

    With ``mask`` (``[..., K]``, 1 = real candidate) the mean is over real candidates and padded slots get 0.
    """
    r = rewards.float()
    m = torch.ones_like(r) if mask is None else mask.to(r.dtype)
    mean = (r * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    return (r - mean) * m


def listmle_loss(scores: Tensor, rewards: Tensor, mask: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """ListMLE / Plackett-Luce NLL (MAESTRO Eq. 7, Xia et al. 2008), over the last dim (``[..., K]``).

    sigma sorts ``rewards`` descending; ties keep their input order (stable sort) so the loss is deterministic.
    ``L = -sum_i [ s_sigma(i) - logsumexp(s_sigma(i), ..., s_sigma(K)) ]``. ``mask`` (1 = real candidate) drops
    padded slots from both the sum and the normalisers. Stable tie-breaking still imposes an order among tied
    items; shuffle the list beforehand if its input order is not meaningful (allRank shuffles). ``reduction``: ``"mean"`` / ``"sum"`` over lists or
    ``"none"`` (per-list losses, shape ``[...]``). Gradients flow into ``scores`` only.
    """
    s = scores.float()
    r = torch.as_tensor(rewards, dtype=torch.float32, device=s.device).expand_as(s)
    m = torch.ones_like(s, dtype=torch.bool) if mask is None else mask.to(s.device).bool().expand_as(s)
    r = torch.where(m, r, torch.full_like(r, -math.inf))  # padded slots sort last
    order = torch.sort(-r, dim=-1, stable=True).indices
    # a huge finite fill (not -inf) keeps padded slots out of every logsumexp without NaN gradients
    fill = torch.full_like(s, torch.finfo(torch.float32).min / 4)
    s_sorted = torch.gather(torch.where(m, s, fill), -1, order)
    m_sorted = torch.gather(m, -1, order)
    # reverse cumulative logsumexp: lse_i = log sum_{j >= i} exp(s_j)
    lse = torch.logcumsumexp(s_sorted.flip(-1), dim=-1).flip(-1)
    terms = torch.where(m_sorted, s_sorted - lse, torch.zeros_like(s_sorted))
    per_list = -terms.sum(-1)
    if reduction == "none":
        return per_list
    if reduction == "sum":
        return per_list.sum()
    if reduction == "mean":
        return per_list.mean()
    raise ValueError(f"unknown reduction {reduction!r}")


def choice_loss(choice_logp: Tensor, advantages: Tensor, mask: Tensor | None = None) -> Tensor:
    """CLPO strategic decision loss (MAESTRO Eq. 6): ``-sum_k A_k log pi(k | q, C)``, averaged over slates.

    ``choice_logp[..., K]``: log-prob of the decision segment endorsing candidate k (the summed token log-probs
    of the decision tokens only: choice and its answer, rationale masked out);
    ``advantages``: :func:`slate_advantages`. A single sampled decision a with K=1 and ``A_a`` is CLPO's sampled
    form (``clpo.choice_form=sampled``): its expected gradient, Σ_k π_k A_k ∇log π_k, is not this loss's. ``mask``
    drops padded slots.
    """
    terms = advantages.float().detach() * choice_logp.float()
    if mask is not None:
        terms = terms * mask.to(terms.dtype)
    per_slate = -terms.sum(-1)
    return per_slate.mean() if per_slate.dim() else per_slate


def clpo_loss(l_choice: Tensor, l_rank: Tensor, kl: Tensor | float = 0.0, entropy: Tensor | float = 0.0,
              lambda_rank: float = 1.0, lambda_kl: float = 0.1, lambda_ent: float = 0.01) -> Tensor:
    """MAESTRO Eq. 8: ``L = L_choice + lambda_rank L_rank + lambda_kl L_KL - lambda_ent H``.

    Defaults are App. C.1's KL 0.1 and entropy 0.01; lambda_rank is tuned over {0.1, 0.5, 0.8, 1.0} in the paper.
    """
    return l_choice + lambda_rank * l_rank + lambda_kl * kl - lambda_ent * entropy
