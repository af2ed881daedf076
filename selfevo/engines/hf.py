"""transformers + peft engine: left-padded batches, mixed adapters in one forward, a lean decode loop.

It serves the live weights of a :class:`~selfevo.policy.PolicyStore` (no copy), so an optimizer step is visible to
the next ``generate`` by construction; ``sync_adapter`` has nothing to do. Rows that finish are dropped from the
batch (KV cache, masks and adapters alike) so the tail of a long generation costs only the rows still running.
"""
from __future__ import annotations

import random
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from selfevo.engines.base import ENGINES, render_prompt, truncate_at_stop
from selfevo.engines.kvcache import growing_cache
from selfevo.engines.multilora import MultiLoRA
from selfevo.engines.packed import PackedLinears
from selfevo.types import Completion, Request


@dataclass
class _Row:
    """Decode state of one request."""

    request: Request
    prompt_ids: list[int]
    rng: random.Random
    tokens: list[int]
    logprobs: list[float]
    finish: str | None = None


def eos_ids(tokenizer, model) -> set[int]:
    ids = {tokenizer.eos_token_id}
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    ids.update(extra if isinstance(extra, (list, tuple)) else [extra])
    return {i for i in ids if i is not None}


def sample_next(logits: torch.Tensor, temps: torch.Tensor, top_ps: torch.Tensor, u: torch.Tensor):
    """Sample one token per row by inverse CDF with the given uniforms; temperature 0 is greedy.

    Returns (tokens [B], log-probs of those tokens under the unscaled distribution [B]).
    """
    logits = logits.float()
    greedy = temps <= 0
    peak = logits.max(-1, keepdim=True).values
    unit = bool((temps == 1.0).all())
    scaled = torch.exp(logits - peak) if unit else torch.exp((logits - peak) / temps.clamp(min=1e-6).unsqueeze(-1))
    mass = scaled.sum(-1, keepdim=True)
    lse = peak + torch.log(mass if unit else torch.exp(logits - peak).sum(-1, keepdim=True))
    probs = scaled / mass  # sampling distribution at each row's temperature (unnormalised is fine for the CDF)
    tokens = torch.empty(logits.shape[0], dtype=torch.long)
    nucleus = (top_ps < 1.0) & ~greedy
    plain = ~greedy & ~nucleus
    if greedy.any():
        tokens[greedy] = logits[greedy].argmax(-1)
    if plain.any():
        tokens[plain] = _inverse_cdf(probs[plain], u[plain])
    if nucleus.any():
        tokens[nucleus] = _nucleus(probs[nucleus], top_ps[nucleus], u[nucleus])
    return tokens, (logits.gather(-1, tokens.unsqueeze(-1)) - lse).squeeze(-1)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = probs.cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1)).squeeze(-1)
    return idx.clamp(max=probs.shape[-1] - 1)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p: keep the smallest prefix of the sorted distribution whose mass reaches p (the top token always)."""
    sorted_p, order = probs.sort(-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p
    sorted_p = sorted_p.masked_fill(before >= top_p.unsqueeze(-1), 0.0)
    return order.gather(-1, _inverse_cdf(sorted_p, u).unsqueeze(-1)).squeeze(-1)


def _softcap(logits: torch.Tensor, config) -> torch.Tensor:
    cap = getattr(config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def left_pad(prompts: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    return ids, mask


@ENGINES.register("hf")
class HFEngine:
    """``HFEngine(store)`` generates with the store's backbones and adapters (see :class:`PolicyStore`)."""

    def __init__(self, store, max_batch: int = 64, compact_below: float = 0.75, packed: bool = True):
        self.store = store
        self.packed = packed  # prepacked oneDNN matmuls for frozen bf16 linears when vLLM's CPU ops exist
        self.max_batch = max_batch
        self.compact_below = compact_below

    def sync_adapter(self, agent: str) -> None:
        """Nothing to do: the engine reads the store's live tensors at every ``generate``."""

    def close(self) -> None:
        pass

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        for backbone, idxs in self._by_backbone(requests).items():
            bb = self.store.backbones[backbone]
            prompts = {i: render_prompt(bb.tokenizer, requests[i].messages, requests[i].prefix) for i in idxs}
            order = sorted(idxs, key=lambda i: -len(prompts[i]))  # similar lengths share a batch
            for start in range(0, len(order), self.max_batch):
                chunk = order[start:start + self.max_batch]
                rows = [self._row(requests[i], prompts[i]) for i in chunk]
                for i, comp in zip(chunk, self._generate_batch(bb, rows)):
                    out[i] = comp
        return out  # type: ignore[return-value]

    def _by_backbone(self, requests: Sequence[Request]) -> Mapping[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(self.store.backbone_for(r), []).append(i)
        return groups

    @staticmethod
    def _row(request: Request, prompt_ids: list[int]) -> _Row:
        seed = request.seed if request.seed is not None else random.getrandbits(63)
        return _Row(request, prompt_ids, random.Random(seed), [], [])

    @torch.inference_mode()
    def _generate_batch(self, bb, rows: list[_Row]) -> list[Completion]:
        model, tok = bb.model, bb.tokenizer
        stops = eos_ids(tok, model)
        dev = bb.causal_lm.get_output_embeddings().weight.device  # the store's device; sampling stays on the CPU
        ids, attn = (t.to(dev) for t in left_pad([r.prompt_ids for r in rows], tok.pad_token_id))
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        adapters = [r.request.agent for r in rows]
        ctx = MultiLoRA(model, adapters) if bb.is_peft else nullcontext()
        packed = PackedLinears(bb.causal_lm) if self.packed else nullcontext()
        live = list(range(len(rows)))  # rows[live[j]] is batch row j
        temps = torch.tensor([r.request.sampling.temperature for r in rows])
        top_ps = torch.tensor([r.request.sampling.top_p for r in rows])
        limit = max(r.request.sampling.max_new_tokens for r in rows)
        with ctx, packed:
            net = bb.causal_lm
            logits, cache = self._forward(net, ids, attn, pos, growing_cache(net.config, ids.shape[1] + limit))
            for _ in range(limit):
                u = torch.tensor([rows[i].rng.random() for i in live])
                tokens, logps = sample_next(logits.cpu(), temps, top_ps, u)
                self._record(rows, live, tokens.tolist(), logps.tolist(), stops, tok)
                keep = [j for j, i in enumerate(live) if rows[i].finish is None]
                if not keep:
                    break
                attn = torch.cat([attn, torch.ones(len(live), 1, dtype=attn.dtype, device=dev)], dim=1)
                pos = pos[:, -1:] + 1
                step_ids = tokens.unsqueeze(-1).to(dev)
                if len(keep) < self.compact_below * len(live):
                    sel = torch.tensor(keep)
                    live = [live[j] for j in keep]
                    temps, top_ps = temps[sel], top_ps[sel]
                    sel = sel.to(dev)
                    attn, pos, step_ids = attn[sel], pos[sel], step_ids[sel]
                    cache.batch_select_indices(sel)
                    if isinstance(ctx, MultiLoRA):
                        ctx.select(sel)
                logits, cache = self._forward(net, step_ids, attn, pos, cache)
        return [self._completion(r, tok) for r in rows]

    @staticmethod
    def _forward(net, ids, attn, pos, cache):
        """Last-position logits [B, V]. The head runs on a contiguous [B, H] slice: ``logits_to_keep`` hands it a
        strided 3-D view, for which ``matmul`` copies the whole vocabulary matrix once per row."""
        out = net.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
        logits = net.get_output_embeddings()(out.last_hidden_state[:, -1, :].contiguous())
        return _softcap(logits, net.config), out.past_key_values

    @staticmethod
    def _record(rows, live, tokens, logps, stops, tok) -> None:
        for i, t, lp in zip(live, tokens, logps):
            row = rows[i]
            if row.finish is not None:
                continue
            row.tokens.append(t)
            row.logprobs.append(lp)
            sp = row.request.sampling
            if t in stops and not sp.ignore_eos:
                row.finish = "stop"
            elif sp.stop and truncate_at_stop(tok.decode(row.tokens[-32:]), sp.stop)[1]:
                row.finish = "stop"
            elif len(row.tokens) >= sp.max_new_tokens:
                row.finish = "length"

    @staticmethod
    def _completion(row: _Row, tok) -> Completion:
        text, _ = truncate_at_stop(tok.decode(row.tokens, skip_special_tokens=True), row.request.sampling.stop)
        return Completion(row.request, row.prompt_ids, row.tokens, row.logprobs, text, row.finish or "length")
