"""SeqBatch: right-padded token sequences with a loss mask and per-row extras, cut into micro-batches."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

TEMPERATURE = "temperature"  # the extra [B] holding each row's sampling temperature (0: greedy)


@dataclass
class SeqBatch:
    """Right-padded sequences: ``loss_mask`` is 1 on the completion tokens that are scored.

    ``extras`` holds per-row tensors ([B] or [B, T]: advantages, old or reference log-probs, further masks such as
    a selector's decision and rationale tokens, ...) that travel with their rows when the batch is sorted and cut
    into micro-batches. ``groups`` (one key per row, optional) names rows that must stay in ONE micro-batch — a
    slate of candidates for a listwise loss. The extra :data:`TEMPERATURE` ([B]) is each row's sampling temperature:
    :class:`~selfevo.policy.PolicyStore` scores a row's tokens at it (``logprob_temperature``); rows without it at 1.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    groups: list | None = None

    def with_extras(self, **tensors: torch.Tensor) -> "SeqBatch":
        return SeqBatch(self.input_ids, self.attention_mask, self.loss_mask, {**self.extras, **tensors}, self.groups)

    def without_extras(self, *names: str) -> "SeqBatch":
        return SeqBatch(self.input_ids, self.attention_mask, self.loss_mask,
                        {k: v for k, v in self.extras.items() if k not in names}, self.groups)

    def with_groups(self, groups: Sequence) -> "SeqBatch":
        if len(groups) != self.input_ids.shape[0]:
            raise ValueError(f"{len(groups)} group keys for {self.input_ids.shape[0]} rows")
        return SeqBatch(self.input_ids, self.attention_mask, self.loss_mask, self.extras, list(groups))

    def right_padded(self) -> bool:
        """Whether every row is its tokens then padding (no gaps, no left padding): then a causal mask alone keeps
        padding out of every real token's attention, and a forward needs no padding mask."""
        m = self.attention_mask
        return bool((m.cumsum(-1) == m.sum(-1, keepdim=True)).logical_or(m.bool()).all() and (m[:, 0] > 0).all())

    def micro_batches(self, size: int) -> list["SeqBatch"]:
        """Rows sorted by length (longest first) and cut into micro-batches of at most ``size`` rows, each trimmed
        to its width. With ``groups``, whole groups are packed instead (longest group first; a group larger than
        ``size`` forms a micro-batch of its own), so a group never spans two micro-batches."""
        lengths = self.attention_mask.sum(-1)
        if self.groups is None:
            order = torch.argsort(lengths, descending=True).tolist()
            return [self.rows(order[i:i + size]) for i in range(0, len(order), size)]
        members: dict = {}
        for i, g in enumerate(self.groups):
            members.setdefault(g, []).append(i)
        packed, current = [], []
        for rows in sorted(members.values(), key=lambda r: -int(lengths[r].max())):
            if current and len(current) + len(rows) > size:
                packed.append(current)
                current = []
            current = current + rows
        return [self.rows(rows) for rows in packed + ([current] if current else [])]

    def shard(self, rank: int, world: int) -> "SeqBatch | None":
        """This rank's rows of a data-parallel step (None if it gets none): rows — or whole ``groups`` — sorted by
        length (longest first) and dealt back and forth over the ranks (0, 1, …, w-1, w-1, …, 0, 0, …), so every
        rank gets about the same number of tokens. ``world == 1`` gives the batch itself."""
        if world == 1:
            return self
        lengths = self.attention_mask.sum(-1).tolist()
        units: dict = {}
        for i, g in enumerate(self.groups if self.groups is not None else range(len(lengths))):
            units.setdefault(g, []).append(i)
        ordered = sorted(units.values(), key=lambda rows: -max(lengths[i] for i in rows))  # stable: ties by position
        mine = [i for k, rows in enumerate(ordered)
                if (k % world if (k // world) % 2 == 0 else world - 1 - k % world) == rank for i in rows]
        return self.rows(sorted(mine)) if mine else None

    @staticmethod
    def build(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int) -> "SeqBatch":
        width = max(len(p) + len(c) for p, c in zip(prompts, completions))
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        loss = torch.zeros(len(prompts), width)
        for i, (p, c) in enumerate(zip(prompts, completions)):
            n = len(p) + len(c)
            ids[i, :n] = torch.tensor(list(p) + list(c), dtype=torch.long)
            attn[i, :n] = 1
            loss[i, len(p):n] = 1.0
        return SeqBatch(ids, attn, loss)

    def rows(self, idx: Sequence[int]) -> "SeqBatch":
        sel = torch.as_tensor(list(idx), dtype=torch.long)
        width = int(self.attention_mask[sel].sum(-1).max())
        extras = {k: (v[sel, :width] if v.dim() == 2 else v[sel]) for k, v in self.extras.items()}
        groups = [self.groups[i] for i in idx] if self.groups is not None else None
        return SeqBatch(self.input_ids[sel, :width], self.attention_mask[sel, :width], self.loss_mask[sel, :width],
                        extras, groups)
