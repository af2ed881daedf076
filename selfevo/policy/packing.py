"""Shared-prompt packing: rows that begin with the same prompt run that prompt's forward once.

The completions of one prompt (a GRPO group, a listwise slate's candidates, an agent's repeated turns) are separate
rows of a batch, so every row runs the prompt's forward pass again. Packed, such rows become one sequence: the
prompt once, then each row's own tokens one after the other. An attention mask lets every token see the prompt and
the earlier tokens of its own row only, and position ids continue each row from the prompt's end, so each token's
hidden state is the one its own row gives (up to floating-point summation order). ``where`` maps every token of
the batch to its place in the packed rows, so log-probs come back in the batch's own layout.

Rows share their prompt by default: the tokens before their first scored one. A batch's extra :data:`SHARED_PREFIX`
([B]) sets each row's shared part instead, e.g. shorter than its prompt: CLPO's listwise candidate rows (a row's
prompt and rationale, then one candidate's decision) share only the slate's prompt, with the slate's own rows, so
a slate and all its candidate rows run that prompt once; rows a recipe keeps together (a slate, whose chained
decision rows carry their rationale after its prompt) share the tokens they all begin with (:func:`group_prefixes`).

A packed row holds at most ``max_factor`` times the group's longest row (under another attention than selfevo's its
attention is a full ``L x L`` matmul under the explicit mask; unbounded, a group of 64 rows would be one sequence of
64 rows' length): a group that does not fit is dealt over several packed rows, each with its own copy of the
prompt. ``segments`` gives the same visibility as ranges, from which :func:`selfevo.attention.segmented_attention`
computes only the prompt's and each row's own blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


SHARED_PREFIX = "shared_prefix"  # the extra [B]: leading tokens a row may share with others (default: its prompt)


@dataclass
class Packed:
    input_ids: Tensor  # [G, L]
    position_ids: Tensor  # [G, L]
    where: Tensor  # [B, T] long: flat index (g * L + p) of each real token of the batch; -1 on padding
    tokens: int  # real tokens in the packed rows (the batch's: attention_mask.sum())
    # per packed row: (prompt length, [(start, end) of each row's own tokens]); the attention runs from these
    # (:func:`selfevo.attention.segmented_attention`) or from :attr:`mask`, built from them on demand
    segments: list[tuple[int, list[tuple[int, int]]]]

    @property
    def mask(self) -> Tensor:
        """[G, 1, L, L] bool, True = attend: the prompt causally, each row's tokens the prompt and causally their
        own; a padding position sees the prompt and itself (never an empty row)."""
        rows, width = self.input_ids.shape
        seg = -2 - torch.arange(width).repeat(rows, 1)  # padding: a segment of its own per position
        for g, (p, spans) in enumerate(self.segments):
            seg[g, :p] = -1  # the prompt: seen by every row
            for k, (start, end) in enumerate(spans):
                seg[g, start:end] = k
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        visible = (seg[:, None, :] == -1) | (seg[:, None, :] == seg[:, :, None])  # [G, query, key]
        return (visible & causal)[:, None]


def prompt_length(attention_mask: Tensor, loss_mask: Tensor) -> list[int]:
    """Per row, the tokens before its first scored one (its whole length when none is scored)."""
    lengths = attention_mask.sum(-1).tolist()
    scored = (loss_mask > 0) & (attention_mask > 0)
    return [int(torch.nonzero(scored[i])[0]) if bool(scored[i].any()) else lengths[i] for i in range(len(lengths))]


def shared_lengths(attention_mask: Tensor, loss_mask: Tensor, shared: Tensor | None = None) -> list[int]:
    """Per row, the leading tokens it may share: ``shared`` ([B], a batch's :data:`SHARED_PREFIX` extra) where
    given, else its prompt (:func:`prompt_length`). A length outside 0..the row's tokens is a ValueError."""
    if shared is None:
        return prompt_length(attention_mask, loss_mask)
    lengths, out = attention_mask.sum(-1).tolist(), [int(v) for v in shared.tolist()]
    bad = [i for i, (p, n) in enumerate(zip(out, lengths)) if not 0 <= p <= n]
    if bad:
        raise ValueError(f"{SHARED_PREFIX} of row {bad[0]} is {out[bad[0]]}: not within its {lengths[bad[0]]} tokens")
    return out


def prompt_keys(input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor,
                shared: Tensor | None = None) -> list[tuple]:
    """One key per row: its shared tokens (:func:`shared_lengths`; rows with equal keys can share their forward); a
    row with none gets a key of its own."""
    return _keys(input_ids, shared_lengths(attention_mask, loss_mask, shared))


def _keys(input_ids: Tensor, prefixes: list[int]) -> list[tuple]:
    return [tuple(input_ids[i, :p].tolist()) if p > 0 else ("row", i) for i, p in enumerate(prefixes)]


def _segments(rows: list[int], prefix: int, lengths: list[int], cap: int) -> list[list[int]]:
    """``rows`` (one prompt) dealt in order over packed rows of at most ``cap`` tokens (at least one row each)."""
    out, current, size = [], [], prefix
    for i in rows:
        own = lengths[i] - prefix
        if current and size + own > cap:
            out.append(current)
            current, size = [], prefix
        current.append(i)
        size += own
    return out + [current]


def pack_shared_prompts(input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor, max_factor: float = 3.0,
                        shared: Tensor | None = None) -> Packed | None:
    """Pack a right-padded batch's rows by shared prompt (see the module doc; ``shared``: the batch's
    :data:`SHARED_PREFIX` extra, if any); None when no two rows share one (nothing to save). Rows keep their order
    within a packed row; packed rows follow their groups' first rows."""
    if max_factor < 1:
        raise ValueError(f"max_factor must be at least 1, not {max_factor}")
    lengths = attention_mask.sum(-1).tolist()
    prefixes = shared_lengths(attention_mask, loss_mask, shared)
    groups: dict = {}
    for i, key in enumerate(_keys(input_ids, prefixes)):
        groups.setdefault(key, []).append(i)
    if all(len(rows) == 1 for rows in groups.values()):
        return None
    packs = []  # (prefix length, rows)
    for rows in groups.values():
        prefix = prefixes[rows[0]] if len(rows) > 1 else lengths[rows[0]]
        cap = int(max_factor * max(lengths[i] for i in rows))
        packs += [(prefix, seg) for seg in _segments(rows, prefix, lengths, cap)]
    width = max(p + sum(lengths[i] - p for i in rows) for p, rows in packs)
    n, t = input_ids.shape
    ids = torch.zeros(len(packs), width, dtype=input_ids.dtype)
    pos = torch.zeros(len(packs), width, dtype=torch.long)
    where = torch.full((n, t), -1, dtype=torch.long)
    segments = []
    for g, (p, rows) in enumerate(packs):
        ids[g, :p] = input_ids[rows[0], :p]
        pos[g, :p] = torch.arange(p)
        where[rows, :p] = g * width + torch.arange(p)
        at, spans = p, []
        for i in rows:
            own = lengths[i] - p
            ids[g, at:at + own] = input_ids[i, p:lengths[i]]
            pos[g, at:at + own] = torch.arange(p, lengths[i])
            where[i, p:lengths[i]] = g * width + torch.arange(at, at + own)
            if own:
                spans.append((at, at + own))
            at += own
        segments.append((p, spans))
    return Packed(ids, pos, where, int(sum(lengths)), segments)


def common_prefix(input_ids: Tensor, rows: list[int], prompts: list[int]) -> int:
    """The leading tokens all of ``rows`` have in common, at most the shortest of their prompts (``prompts``: every
    row's prompt length): a slate's own prompt, also when some of its rows carry more before their scored tokens
    (a chained selection's decision row: the prompt, its rationale and ``Chosen: Candidate``)."""
    n = min((prompts[i] for i in rows), default=0)
    ids = input_ids[rows, :n]
    same = (ids == ids[:1]).all(0)
    return n if bool(same.all()) else int(torch.nonzero(~same)[0])


def packed_positions(input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor,
                     shared: Tensor | None = None) -> int:
    """Token positions (rows × width, padding included) the rows' forward runs, packed by ``shared``
    (:func:`pack_shared_prompts`) or, where no two rows share, as they are."""
    packed = pack_shared_prompts(input_ids, attention_mask, loss_mask, shared=shared)
    return (packed.input_ids if packed is not None else input_ids).numel()


def group_prefixes(input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor, groups: list) -> Tensor | None:
    """A batch's :data:`SHARED_PREFIX` when the rows of one group (``groups``: a key per row, e.g. a slate kept in
    one micro-batch) share the tokens they all have in common (:func:`common_prefix`) rather than each its own
    prompt: for every group where that runs fewer positions (:func:`packed_positions`), its rows' common prefix;
    elsewhere each row's prompt. None where no group gains (the default packing is the same)."""
    prompts = prompt_length(attention_mask, loss_mask)
    out, gained = torch.tensor(prompts), False
    members: dict = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    for rows in members.values():
        common = common_prefix(input_ids, rows, prompts)
        if len(rows) < 2 or common == 0 or all(prompts[i] == common for i in rows):
            continue
        width = int(attention_mask[rows].sum(-1).max())
        part = (input_ids[rows, :width], attention_mask[rows, :width], loss_mask[rows, :width])
        if packed_positions(*part, torch.full((len(rows),), common)) < packed_positions(*part):
            out[rows], gained = common, True
    return out if gained else None
