"""What every optimizer shares: the samples it trains on, the registry, and the clipped step.

An optimizer is a callable ``optimizer(store, agent, samples) -> stats`` built by its registered factory from the
run's trainer section (:class:`~selfevo.loop.TrainerCfg`, e.g. ``OPTIMIZERS.get("reinforce_pp")(cfg.trainer)``; a
test builds one as ``TrainerCfg(kl_coef=0.1)``), of which it reads ``kl_coef``, ``kl_estimator``,
``kl_in_reward``, ``clip_eps``, ``loss_agg``, ``train_batch`` and ``epochs``. It turns rewards into advantages (pure functions in
:mod:`selfevo.optimizers.objectives`) and runs ``PolicyStore.update``; learning rate, micro-batch size and gradient
clipping belong to the store (``StoreSettings(lr=, micro_batch=, max_grad_norm=)``), not to the optimizer.

:class:`Samples` carries one agent's training rows: a :class:`~selfevo.policy.SeqBatch` (several masks per row ride
in its ``extras``; a slate kept in one micro-batch by its ``groups``), the rows' rewards, and normalisation groups
(role, prompt, ...; each optimizer says what it does without them). A recipe says how its turns become rows in one
typed value, :class:`UpdateSpec` (groups, rows kept together, which turns train, per-row extras), which reaches
:meth:`Samples.from_turns` whole through :func:`train_agents`.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch

from selfevo import distributed
from selfevo.interaction.episodes import Episode, Turn, rewarded_turns
from selfevo.optimizers.objectives import (aggregate_loss, count_tokens, kl_estimate, masked_mean, ppo_clip_loss,
                                           step_normaliser)
from selfevo.optimizers.trainer import TrainerCfg
from selfevo.policy import PolicyStore, SeqBatch
from selfevo.policy.batch import TEMPERATURE
from selfevo.policy.packing import SHARED_PREFIX, group_prefixes
from selfevo.registry import Registry

WHITEN_EPS = 1e-8  # ε of every advantage normalisation ``(x - mean) / (std + ε)``


def on_policy(cfg: TrainerCfg) -> bool:
    """One step over all rows: the ratio is exactly 1 and no separate rollout-policy pass is needed."""
    return cfg.train_batch == 0 and cfg.epochs == 1


@dataclass(frozen=True)
class UpdateSpec:
    """How one update turns each agent's rewarded turns into training rows: ``group_by`` (a normalisation group
    per turn, e.g. its label; None: the optimizer's own grouping, e.g. GRPO's rows of one prompt), ``keep_together``
    (rows with one key share a micro-batch, and the tokens they all begin with where that runs fewer positions: a
    slate, whose chained decision rows carry their rationale after the slate's prompt), ``include`` (which rewarded
    turns train; None: all) and ``extras`` (per-row values for ``batch.extras``, :meth:`Samples.from_turns`)."""

    group_by: Callable[[Turn], Hashable] | None = None
    keep_together: Callable[[Turn], Hashable] | None = None
    include: Callable[[Turn], bool] | None = None
    extras: Callable[[Turn], dict] | None = None

    def trains(self, turn: Turn) -> bool:
        """Whether ``turn`` (a rewarded turn) is one of the update's rows."""
        return self.include is None or self.include(turn)


@dataclass
class Samples:
    """One agent's training rows: ``batch`` [B rows], ``rewards`` [B], optional ``groups`` (one key per row)."""

    batch: SeqBatch
    rewards: torch.Tensor
    groups: list[Hashable] | None = None

    @classmethod
    def from_turns(cls, turns: Sequence[Turn], pad_id: int, spec: UpdateSpec = UpdateSpec()) -> "Samples":
        """Rows from rewarded turns (prompt + completion ids); the spec's ``group_by`` gives normalisation groups and
        ``keep_together`` the keys of rows that must share a micro-batch (and, packed, the tokens they all have in
        common: :func:`~selfevo.policy.packing.group_prefixes`, the extra
        :data:`~selfevo.policy.packing.SHARED_PREFIX`). ``extras(turn)`` gives per-row values for
        ``batch.extras``: a number (→ a [B] tensor), one value per completion token (→ [B, T], 0 off the
        completion; e.g. a selector's decision and rationale masks) or a tensor (→ [B, ...], zero-padded to the
        largest; e.g. a selector's candidate decisions, [K, L] token ids). Each row's sampling temperature (a role's
        override included) rides in the extra :data:`~selfevo.policy.batch.TEMPERATURE`: the store scores the row
        at it (``trainer.logprob_temperature``)."""
        batch = SeqBatch.build([t.completion.prompt_ids for t in turns], [t.completion.token_ids for t in turns],
                               pad_id)
        batch = batch.with_extras(**{TEMPERATURE: torch.tensor([float(t.completion.request.sampling.temperature)
                                                                for t in turns])})
        if spec.keep_together is not None:
            batch = batch.with_groups([spec.keep_together(t) for t in turns])
            shared = group_prefixes(batch.input_ids, batch.attention_mask, batch.loss_mask, batch.groups)
            if shared is not None:
                batch = batch.with_extras(**{SHARED_PREFIX: shared})
        if spec.extras is not None:
            batch = batch.with_extras(**_row_extras(turns, [spec.extras(t) for t in turns], batch.loss_mask.shape))
        rewards = torch.tensor([float(t.reward) for t in turns])
        return cls(batch, rewards, [spec.group_by(t) for t in turns] if spec.group_by is not None else None)


def _row_extras(turns: Sequence[Turn], values: list[dict], shape: torch.Size) -> dict[str, torch.Tensor]:
    """Per-row extras as tensors: numbers → [B]; per-completion-token lists → [B, T] at the completion's positions;
    tensors → stacked [B, ...], each zero-padded to the largest size in every dimension."""
    out: dict[str, torch.Tensor] = {}
    for name in (values[0] if values else {}):
        column = [v[name] for v in values]
        if all(isinstance(x, (int, float)) for x in column):
            out[name] = torch.tensor(column, dtype=torch.float32)
            continue
        if all(torch.is_tensor(x) for x in column):
            out[name] = _stack_padded(column)
            continue
        grid = torch.zeros(shape)
        for i, (turn, x) in enumerate(zip(turns, column)):
            if len(x) != len(turn.completion.token_ids):
                raise ValueError(f"extra '{name}' has {len(x)} values for {len(turn.completion.token_ids)} tokens")
            start = len(turn.completion.prompt_ids)
            grid[i, start:start + len(x)] = torch.as_tensor(x, dtype=torch.float32)
        out[name] = grid
    return out


def _stack_padded(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """[B, ...]: the tensors (same number of dimensions) stacked, each zero-padded at the end of every dimension."""
    dims = {t.dim() for t in tensors}
    if len(dims) != 1:
        raise ValueError(f"per-row tensor extras of different ranks: {sorted(dims)}")
    shape = [max(t.shape[d] for t in tensors) for d in range(dims.pop())]
    out = torch.zeros(len(tensors), *shape, dtype=tensors[0].dtype)
    for i, t in enumerate(tensors):
        out[(i, *[slice(0, n) for n in t.shape])] = t
    return out


@dataclass(frozen=True)
class Optimizer:
    """An optimizer built for a run: call it as ``optimizer(store, agent, samples) -> stats`` (its ``update``). What
    a recipe may ask of it: ``trains`` (False for ``none``: no parameter update, so a recipe need not sample rows to
    train on) and ``row_extras``, the per-row ``batch.extras`` it reads (CLPO's masks; a recipe gives them through
    :attr:`UpdateSpec.extras`)."""

    update: Callable[[PolicyStore, str, Samples], dict]
    trains: bool = True
    row_extras: frozenset[str] = frozenset()

    def __call__(self, store: PolicyStore, agent: str, samples: Samples) -> dict:
        return self.update(store, agent, samples)


OPTIMIZERS: Registry[Callable[..., Optimizer]] = Registry("optimizer")


@torch.no_grad()
def score(store: PolicyStore, agent: str | None, batch: SeqBatch, backbone: str | None = None) -> torch.Tensor:
    """[B, T] log-probs of the batch, micro-batch by micro-batch, in the batch's own row order. Data-parallel
    (every rank calls it with the same batch): micro-batch ``j`` is scored on rank ``j % world`` and the rows are
    summed into place on every rank (the same micro-batches as in one process: the same numbers)."""
    out = torch.zeros(batch.input_ids.shape)
    step, rank, world = store.settings.micro_batch, distributed.rank(), distributed.world_size()
    for j, s in enumerate(range(0, batch.input_ids.shape[0], step)):
        if j % world != rank:
            continue
        rows = list(range(s, min(s + step, batch.input_ids.shape[0])))
        mb = batch.rows(rows)
        out[s:s + len(rows), :mb.input_ids.shape[1]] = store.token_logprobs(agent, mb, backbone)
    return distributed.all_reduce_sum(out)


def reference_logprobs(store: PolicyStore, agent: str, batch: SeqBatch, cfg: TrainerCfg):
    """(current, reference) log-probs when KL is used; (None, None) otherwise. The reference is the agent's frozen
    reference adapter when it has one (:meth:`PolicyStore.reference_of`), else the backbone with the adapter
    disabled. The current log-probs are scored only when the KL folds into the reward (``kl_in_reward``: the
    return needs them before the update); as a loss term the KL is taken from the training forward itself
    (:func:`policy_update` reports it as ``kl``), so the current policy is not scored: (None, reference)."""
    if cfg.kl_coef == 0:
        return None, None
    cur = score(store, agent, batch) if cfg.kl_in_reward else None  # (scored first, as before)
    return cur, score(store, store.reference_of(agent), batch, store.agent_backbone[agent])


def policy_update(store: PolicyStore, agent: str, batch: SeqBatch, advantages: torch.Tensor, cfg: TrainerCfg,
                ref_logp: torch.Tensor | None = None) -> dict:
    """Clipped-surrogate updates of ``agent`` (CoMAS Eq. 11) over ``batch``: ``cfg.epochs`` passes of optimizer
    steps of ``cfg.train_batch`` rows (shuffled per pass, seeded by the agent and its adapter version), each
    aggregated over its own rows by ``cfg.loss_agg``. ``advantages`` [B, T] (0 off the mask); with ``ref_logp`` and
    ``kl_in_reward=False`` a KL loss term is added, and the stats' ``kl`` is its token mean (the estimator's, from
    each parameter update's own forward, averaged over the steps).

    The old log-probs: the first parameter update runs on the rollout policy itself, so its old log-probs are its own
    forward's, detached (ratio exactly 1, under the same LoRA dropout mask as the gradient: :func:`first_update_rows`);
    the rows of later steps are scored once before the first step (no dropout, as the engine samples). One step over
    all rows needs no scoring at all.
    """
    extras = {"adv": advantages}
    if ref_logp is not None and not cfg.kl_in_reward:
        extras["ref"] = ref_logp
    rows = batch.input_ids.shape[0]
    steps_rows = update_rows(rows, cfg, torch.Generator().manual_seed(hash_seed(agent, store.versions[agent])))
    later = sorted({i for step in steps_rows[1:] for i in step})
    if later:
        extras["old"] = old_logprobs(store, agent, batch, later)
    batch = batch.with_extras(**extras)
    steps = [_clipped_step(store, agent, first_update_rows(batch.rows(steps_rows[0])), cfg)]
    steps += [_clipped_step(store, agent, batch.rows(r), cfg) for r in steps_rows[1:]]
    return _merge_updates(steps)


def update_rows(rows: int, cfg: TrainerCfg, gen: torch.Generator) -> list[list[int]]:
    """Row indices of every parameter update of :func:`policy_update`: ``cfg.epochs`` passes, each over the rows in a
    random order (``gen``; in order when one step takes them all) cut into steps of ``cfg.train_batch`` rows."""
    size = cfg.train_batch or rows
    out = []
    for _ in range(cfg.epochs):
        order = list(range(rows)) if on_policy(cfg) else torch.randperm(rows, generator=gen).tolist()
        out += [order[start:start + size] for start in range(0, rows, size)]
    return out


def old_logprobs(store: PolicyStore, agent: str, batch: SeqBatch, rows: Sequence[int]) -> torch.Tensor:
    """[B, T] log-probs of the rollout policy for ``rows`` of ``batch`` (scored now, before any step), 0 elsewhere."""
    out = torch.zeros(batch.input_ids.shape)
    scored = score(store, agent, batch.rows(rows))
    out[torch.as_tensor(list(rows)), :scored.shape[1]] = scored
    return out


def first_update_rows(batch: SeqBatch) -> SeqBatch:
    """The first parameter update's rows without old log-probs: the policy has not moved since the rollout, so the
    loss takes its own forward's log-probs, detached, as the old ones (ratio exactly 1). Scored apart, without
    dropout, they would differ from the forward's under LoRA dropout by the dropped inputs alone, and the clip
    would cut gradients of a policy that has not changed."""
    return batch.without_extras("old")


def _clipped_step(store: PolicyStore, agent: str, batch: SeqBatch, cfg: TrainerCfg) -> dict:
    n = count_tokens([batch.loss_mask])  # the whole step's tokens (every rank holds the whole batch)
    norm = step_normaliser([batch.loss_mask], cfg.loss_agg)  # the step's tokens or non-empty rows, by loss_agg
    # this rank's clipped tokens, Σ (old - new) log-prob, Σ KL-to-reference term (when it is a loss term)
    sums = torch.zeros(3, dtype=torch.float64)

    def loss_fn(logp: torch.Tensor, mb: SeqBatch) -> torch.Tensor:
        old = mb.extras["old"] if "old" in mb.extras else logp.detach()
        loss, clip_frac = ppo_clip_loss(logp, old, mb.extras["adv"], mb.loss_mask, cfg.clip_eps)
        tokens = float(mb.loss_mask.sum())
        sums[0] += float(clip_frac) * tokens
        sums[1] += float(masked_mean(old - logp.detach(), mb.loss_mask)) * tokens
        total = aggregate_loss(loss, mb.loss_mask, cfg.loss_agg, norm)
        if "ref" in mb.extras:
            kl = kl_estimate(logp, mb.extras["ref"], cfg.kl_estimator)
            sums[2] += float((kl.detach() * mb.loss_mask).sum())  # Σ kl_t of this micro-batch (a token mean below)
            total = total + cfg.kl_coef * aggregate_loss(kl, mb.loss_mask, cfg.loss_agg, norm)
        return total

    live = gradient_rows(batch)
    stats = store.update(agent, live, loss_fn)
    stats["rows_left_out"] = batch.input_ids.shape[0] - (live.input_ids.shape[0] if live is not None else 0)
    clipped, kl_rollout, kl_ref = (distributed.all_reduce_sum(sums) / max(n, 1.0)).tolist()
    stats["clip_frac"], stats["kl_rollout"] = clipped, kl_rollout  # token means over the whole step
    if "ref" in batch.extras:
        stats["kl"] = kl_ref
    return stats


def gradient_rows(batch: SeqBatch) -> SeqBatch | None:
    """The rows of a clipped step that have a gradient (None if none has). On-policy (no ``old`` log-probs: ratio 1)
    and without a KL loss term (no ``ref``), a row whose advantage is 0 on every token adds exactly 0 to the loss,
    its gradient and the step's statistics (-min(ratio A, clip(ratio) A) = 0; old - new = 0), so it is not run: a
    GRPO group whose answers all scored alike, a role whose rewards are all equal. The step's normaliser still counts
    its tokens (:func:`_clipped_step` counts them before), so the update is the one over all rows."""
    if "old" in batch.extras or "ref" in batch.extras:
        return batch
    live = (batch.extras["adv"] * batch.loss_mask != 0).any(-1).nonzero().flatten().tolist()
    if len(live) == batch.input_ids.shape[0]:
        return batch
    return batch.rows(live) if live else None


def _merge_updates(steps: list[dict]) -> dict:
    """Stats of several parameter updates: loss, grad norm, clip fraction and KL to the rollout policy averaged;
    ``parameter_updates`` counts the steps taken (a non-finite gradient skips one), ``rows_left_out`` the rows not run
    for want of a gradient (:func:`gradient_rows`)."""
    mean = lambda key: sum(s[key] for s in steps) / len(steps)  # noqa: E731
    merged = {"loss": mean("loss"), "grad_norm": mean("grad_norm"), "skipped": any(s["skipped"] for s in steps),
              "clip_frac": mean("clip_frac"), "kl_rollout": mean("kl_rollout"),
              "parameter_updates": sum(not s["skipped"] for s in steps),
              "rows_left_out": sum(s["rows_left_out"] for s in steps)}
    if all("kl" in s for s in steps):
        merged["kl"] = mean("kl")
    return merged


def hash_seed(*parts) -> int:
    """A stable 63-bit seed from ``parts`` (independent of Python's hash randomisation)."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)


def train_agents(store: PolicyStore, optimizer: Optimizer, episodes: list[Episode], agents: Sequence[str],
                 spec: UpdateSpec = UpdateSpec(), progress: Callable[[str], None] | None = None) -> dict:
    """One optimizer call per agent over all of its rewarded turns that ``spec`` trains, made rows as ``spec`` says
    (:meth:`Samples.from_turns`); per-agent stats (floats rounded; ``rows`` and ``tokens``: its rows and
    their prompt and completion tokens without padding, unless the optimizer reports its own). ``progress`` gets a
    one-line status before each agent's call (agent k of n, rows and tokens done of the update's total)."""
    work = {}
    for agent in agents:
        turns = [t for t in rewarded_turns(episodes, agent) if spec.trains(t)]
        if turns:
            work[agent] = (turns, Samples.from_turns(turns, store.tokenizer(agent).pad_token_id, spec))
    total = UpdateProgress(work, progress)
    stats = {}
    for agent, (turns, samples) in work.items():
        total.start(agent)
        out = optimizer(store, agent, samples)
        stats[agent] = {k: round(v, 5) if isinstance(v, float) else v for k, v in out.items()}
        stats[agent].setdefault("rows", len(turns))  # unless the optimizer says which rows it trained on
        stats[agent].setdefault("tokens", total.sizes[agent][1])  # prompt + completion, no padding
    total.start(None)
    return stats


class UpdateProgress:
    """The update's one-line status: ``update agent1 (2/4) · rows 12/48 · tokens 3,100/12,400 done``."""

    def __init__(self, work: dict, report: Callable[[str], None] | None):
        self.sizes = {a: (len(turns), int(s.batch.attention_mask.sum())) for a, (turns, s) in work.items()}
        self.rows, self.tokens = (sum(v[i] for v in self.sizes.values()) for i in (0, 1))
        self.report, self.done, self.k, self.prev = report, [0, 0], 0, None

    def start(self, agent: str | None) -> None:
        """Before ``agent``'s call (None: after the last): count the agent before it as done, report."""
        if self.prev is not None:
            self.done = [d + n for d, n in zip(self.done, self.sizes[self.prev])]
        self.k, self.prev = self.k + 1, agent
        if self.report is None:
            return
        who = f"update {agent} ({self.k}/{len(self.sizes)})" if agent else "update done"
        self.report(f"{who} · rows {self.done[0]}/{self.rows} · tokens {self.done[1]:,}/{self.tokens:,}")
