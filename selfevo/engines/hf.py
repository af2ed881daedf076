"""transformers + peft engine: left-padded batches, mixed adapters in one forward, a lean decode loop.

It serves the live weights of a :class:`~selfevo.policy.PolicyStore` (no copy), so a parameter update is visible to
the next ``generate`` by construction; ``sync_adapter`` has nothing to do. Rows that finish are dropped from the
batch (KV cache, masks and adapters alike) so the tail of a long generation costs only the rows still running.
"""
from __future__ import annotations

import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from contextlib import ExitStack
from typing import Hashable, Sequence

import torch

from selfevo import heap
from selfevo.engines.base import ENGINES, RequestSource, render_prompt, serve_in_waves, truncate_at_stop
from selfevo.engines import kvcache, lean
from selfevo.engines.multilora import MultiLoRA
from selfevo.engines.packed import PackedLinears
from selfevo.shapes import Shapes
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
    """``HFEngine(store)`` generates with the store's backbones and adapters (see :class:`PolicyStore`).

    It batches continuously (:meth:`stream`): a request joins the running batch as soon as it is ready and a row is
    free (its prompt is prefilled on its own and its KV cache merged into the batch's; samples of one prompt and
    adapter joining together, e.g. a GRPO group, prefill it once), finished rows leave it.
    ``generate(requests)`` serves a fixed list so. ``continuous=False``: :meth:`stream` serves in waves instead
    (:func:`~selfevo.engines.base.serve_in_waves`: one ``generate`` call for every ready request). ``max_batch``: rows decoded together per backbone;
    ``compact_below``: finished rows are dropped from the batch once the running ones fall below this fraction
    (or at once when requests wait for the slots); ``join_every``: a request waits at most this many decode steps
    for more to join with it (a join copies the batch's KV cache; several join for the price of one).
    ``lean``: decode steps of Llama-family models go through :class:`~selfevo.engines.lean.LeanDecoder` (the same
    logits, without transformers' per-module overhead); other models always take the full forward.
    ``counters``: decode steps and rows decoded (their ratio is the mean batch: the requests in flight).
    ``trim_every``: while serving, free heap pages go back to the OS at most this often (seconds; 0: never): joins
    and compactions copy KV caches of ever new sizes, whose freed blocks glibc would otherwise keep resident
    (:mod:`selfevo.heap`; a MAESTRO cpu rollout held 1.5 GB of them).
    ``shapes``: the forwards run (:class:`~selfevo.shapes.Shapes`: ``prefill`` by rows joining and padded prompt
    width, ``decode`` by rows in the forward and keys swept, ``merge``/``compact`` KV-cache copies by rows and width).
    ``kv_cache_gib``: the most KV cache a running batch holds (rows × capacity, spare capacity included): requests
    wait while joining would outgrow it (:func:`~selfevo.engines.kvcache.admissible`; a request alone always runs;
    0: no limit). A merge copies the cache, so for a moment the batch holds up to twice this.
    """

    def __init__(self, store, max_batch: int = 64, compact_below: float = 0.75, packed: bool = True,
                 join_every: int = 8, lean: bool = True, trim_every: float = 2.0, kv_cache_gib: float = 0.0,
                 continuous: bool = True):
        self.store = store
        self.continuous = continuous
        self.kv_cache_gib = kv_cache_gib
        self.trim_every = trim_every
        self.lean = lean
        self.packed = packed  # prepacked oneDNN matmuls for frozen bf16 linears when vLLM's CPU ops exist
        self.max_batch = max_batch
        self.compact_below = compact_below
        self.join_every = join_every
        self.counters = {"decode_steps": 0, "decode_rows": 0, "prefill_tokens": 0}
        self.shapes = Shapes()

    @classmethod
    def from_config(cls, section, store, dtype: str, workdir: str | None = None) -> "HFEngine":
        """``engine.name=hf``: its section ``engine.hf`` (``max_batch``, ``kv_cache_gib``, ``continuous``); the dtype
        is the store's; no work folder."""
        hf = section.hf
        return cls(store, max_batch=hf.max_batch, kv_cache_gib=hf.kv_cache_gib, continuous=hf.continuous)

    def sync_adapter(self, agent: str) -> None:
        """Nothing to do: the engine reads the store's live tensors at every ``generate``."""

    def close(self) -> None:
        pass

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        source = ListSource(requests)
        self._serve(source)
        return source.completions

    def stream(self, source: RequestSource) -> None:
        """Serve ``source`` until it has nothing left: continuously (a ready request joins the running batch), or
        with ``continuous=False`` in waves of ``generate`` calls."""
        if self.continuous:
            self._serve(source)
        else:
            serve_in_waves(self.generate, source)

    @torch.inference_mode()
    def _serve(self, source: RequestSource) -> None:
        """Take every ready request, decode one step of every running row, hand finished rows back
        (``source.done``, which may make new requests ready), repeat until nothing runs and nothing is ready."""
        lanes: dict[str, _Lane] = {}
        trimmed = time.monotonic()
        with ExitStack() as stack:
            while True:
                for key, request in source.take():
                    name = self.store.backbone_for(request)
                    if name not in lanes:
                        lanes[name] = stack.enter_context(_Lane(self, self.store.backbones[name], name))
                    lanes[name].wait(key, request)
                busy = [lane for lane in lanes.values() if lane.busy]
                if not busy:
                    return
                for lane in busy:
                    for key, completion in lane.step():
                        source.done(key, completion)
                if self.trim_every and time.monotonic() - trimmed >= self.trim_every:
                    heap.trim()
                    trimmed = time.monotonic()

    @staticmethod
    def _row(request: Request, prompt_ids: list[int]) -> _Row:
        seed = request.seed if request.seed is not None else random.getrandbits(63)
        return _Row(request, prompt_ids, random.Random(seed), [], [])

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


class ListSource:
    """A :class:`RequestSource` over a fixed list: all ready at once, longest prompts first (similar lengths join
    together); ``completions`` in the given order once served."""

    def __init__(self, requests: Sequence[Request]):
        self.requests = list(requests)
        self.completions: list[Completion] = [None] * len(self.requests)  # type: ignore[list-item]
        self._given = False

    def take(self) -> list[tuple[int, Request]]:
        if self._given:
            return []
        self._given = True
        return list(enumerate(self.requests))

    def done(self, key: int, completion: Completion) -> None:
        self.completions[key] = completion


class _Lane:
    """One backbone's running batch: its rows, their attention masks, positions, sampling settings and next-token
    logits, the KV cache, and the adapter context; requests wait in ``waiting`` until they join."""

    def __init__(self, engine: HFEngine, bb, name: str):
        self.engine, self.bb, self.net, self.tok = engine, bb, bb.causal_lm, bb.tokenizer
        self.stops = eos_ids(bb.tokenizer, bb.model)
        self.dev = self.net.get_output_embeddings().weight.device  # the store's device; sampling stays on the CPU
        agents = [a for a, b in engine.store.agent_backbone.items() if b == name]
        self.lora = MultiLoRA(bb.model, [], names=agents) if bb.is_peft else None
        self.packed = PackedLinears(self.net) if engine.packed else nullcontext()
        self.waiting: list[tuple[Hashable, _Row]] = []
        self.rows: list[_Row] = []  # batch row j is rows[j]
        self.keys: list[Hashable] = []
        self.attn = self.pos = self.logits = self.temps = self.top_ps = self.cache = None
        self.since_join = 0
        self.decoder = None
        size = self.net.get_output_embeddings().weight.element_size()
        self.kv_budget = int(engine.kv_cache_gib * 2**30 // kvcache.bytes_per_token(self.net.config, size))

    def __enter__(self) -> "_Lane":
        self.packed.__enter__()
        if self.lora is not None:
            self.lora.__enter__()
        if self.engine.lean and lean.supported(self.net):  # after both: it binds the forwards they install
            self.decoder = lean.LeanDecoder(self.net, self.lora)
        return self

    def __exit__(self, *exc) -> None:
        if self.lora is not None:
            self.lora.__exit__(*exc)
        self.packed.__exit__(*exc)

    @property
    def busy(self) -> bool:
        return bool(self.rows or self.waiting)

    def wait(self, key: Hashable, request: Request) -> None:
        prompt = render_prompt(self.tok, request.messages, request.prefix)
        self.waiting.append((key, HFEngine._row(request, prompt)))

    def step(self) -> list[tuple[Hashable, Completion]]:
        """Let waiting requests join if due, sample one token for every row, drop finished rows if due, and run
        the next decode forward; returns the requests finished in this step."""
        self._join()
        if not self.rows:
            return []
        u = torch.tensor([r.rng.random() for r in self.rows])
        tokens, logps = sample_next(self.logits.cpu(), self.temps, self.top_ps, u)
        running = [r.finish is None for r in self.rows]
        HFEngine._record(self.rows, range(len(self.rows)), tokens.tolist(), logps.tolist(), self.stops, self.tok)
        finished = [(self.keys[j], HFEngine._completion(r, self.tok))
                    for j, r in enumerate(self.rows) if running[j] and r.finish is not None]
        keep = [j for j, r in enumerate(self.rows) if r.finish is None]
        if not keep:
            self._clear()
            return finished
        self.attn = torch.cat([self.attn, torch.ones(len(self.rows), 1, dtype=self.attn.dtype, device=self.dev)], 1)
        self.pos = self.pos[:, -1:] + 1
        step_ids = tokens.unsqueeze(-1).to(self.dev)
        if len(keep) < self.engine.compact_below * len(self.rows):  # (a join drops finished rows as it merges)
            step_ids = step_ids[torch.tensor(keep, device=self.dev)]
            self._compact(keep)
        self.engine.counters["decode_steps"] += 1
        self.engine.counters["decode_rows"] += len(keep)
        self.logits, self.cache = self._decode(step_ids)
        self.engine.shapes.add("decode", step_ids.shape[0], size=kvcache.key_width(self.cache))
        return finished

    def _decode(self, ids: torch.Tensor):
        """Next-token logits [B, V] of one decode step, and the cache."""
        if self.decoder is None:
            return HFEngine._forward(self.net, ids, self.attn, self.pos, self.cache)
        hidden, cache = self.decoder(ids, self.attn, self.pos, self.cache)
        return _softcap(self.net.get_output_embeddings()(hidden.contiguous()), self.net.config), cache

    # ---- rows joining and leaving -------------------------------------------------------------------------------
    def _join(self) -> None:
        """Prefill waiting requests (as many as there are free rows) and merge them into the batch: at once into an
        empty batch, else when enough wait (a quarter of the running rows) or one has waited ``join_every`` steps.
        The merge drops finished rows and left padding no running row needs, in the same copy of the cache. A
        cache that cannot take rows mid-flight (sliding-window layers) takes them only when empty."""
        if not self.waiting:
            return
        self.since_join += 1
        running = [j for j, r in enumerate(self.rows) if r.finish is None]
        if self.rows:
            due = 4 * len(self.waiting) >= len(running) or self.since_join >= self.engine.join_every
            if not (due and kvcache.mergeable(self.cache)) or len(running) >= self.engine.max_batch:
                return
        free = self._admissible(running)
        if not free:
            return
        joining = sorted(self.waiting[:free], key=lambda kr: -len(kr[1].prompt_ids))  # similar lengths together
        self.waiting, self.since_join = self.waiting[free:], 0
        rows = [r for _, r in joining]
        first, source = distinct_prompts(rows)  # rows of one prompt and adapter (a group's samples) prefill once
        ids, attn = (t.to(self.dev) for t in left_pad([rows[i].prompt_ids for i in first], self.tok.pad_token_id))
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        self.engine.counters["prefill_tokens"] += int(attn.sum())
        self.engine.shapes.add("prefill", len(first), size=ids.shape[1])
        if self.lora is not None:
            self.lora.set_rows([rows[i].request.agent for i in first])
        # capacity: the prompt and every new token; joining a running batch, just the prompt (it is merged at once)
        reserve = ids.shape[1] + (0 if running else max(r.request.sampling.max_new_tokens for r in rows))
        # no padding (one row, or equal lengths): no mask, so attention runs SDPA's causal kernel (a prefill sees
        # exactly its own keys, even in a cache with spare capacity)
        mask = None if bool(attn.all()) else attn
        logits, cache = HFEngine._forward(self.net, ids, mask, pos, kvcache.growing_cache(self.net.config, reserve))
        if len(first) < len(rows):  # every row gets its prompt's cache, logits and mask (its own sampler)
            sel = torch.tensor(source, device=self.dev)
            cache.batch_select_indices(sel)
            logits, attn, pos = logits[sel], attn[sel], pos[sel]
        temps = torch.tensor([r.request.sampling.temperature for r in rows])
        top_ps = torch.tensor([r.request.sampling.top_p for r in rows])
        pos = pos[:, -1:]
        if running:  # merge: the running rows and the new ones, right-aligned to the wider of the two
            sel = torch.tensor(running)
            old_attn = self.attn[sel.to(self.dev)]
            lead = _lead(old_attn)
            old_attn = old_attn[:, lead:]
            left = max(r.request.sampling.max_new_tokens - len(r.tokens) for r in [self.rows[j] for j in running] + rows)
            width = kvcache.merge_rows(self.cache, running, lead, cache, attn.shape[1],
                                       max(old_attn.shape[1], attn.shape[1]) + left + 1)
            cache = self.cache
            dsel = sel.to(self.dev)
            attn = torch.cat([_pad_left(old_attn, width), _pad_left(attn, width)])
            pos, logits = torch.cat([self.pos[dsel], pos]), torch.cat([self.logits[dsel], logits])
            temps, top_ps = torch.cat([self.temps[sel], temps]), torch.cat([self.top_ps[sel], top_ps])
            rows = [self.rows[j] for j in running] + rows
            joining = [(self.keys[j], self.rows[j]) for j in running] + joining
            self.engine.shapes.add("merge", len(rows), size=kvcache.key_width(cache))
        self.rows, self.keys = rows, [k for k, _ in joining]
        self.attn, self.pos, self.logits, self.cache, self.temps, self.top_ps = attn, pos, logits, cache, temps, top_ps
        if self.lora is not None:
            self.lora.set_rows([r.request.agent for r in self.rows])

    def _admissible(self, running: list[int]) -> int:
        """How many waiting requests join now: free rows, within the KV budget (``kv_cache_gib``)."""
        free = self.engine.max_batch - len(running)
        if not self.kv_budget:
            return free
        width = self.attn.shape[1] - _lead(self.attn[torch.tensor(running, device=self.dev)]) if running else 0
        left = max((self.rows[j].request.sampling.max_new_tokens - len(self.rows[j].tokens) for j in running),
                   default=0)
        wants = [(len(r.prompt_ids), r.request.sampling.max_new_tokens) for _, r in self.waiting[:free]]
        return kvcache.admissible(len(running), width, left, wants, self.kv_budget)

    def _compact(self, keep: list[int]) -> None:
        """Keep batch rows ``keep``; drop left padding none of them attends to (when the cache allows)."""
        sel = torch.tensor(keep)
        self.rows, self.keys = [self.rows[j] for j in keep], [self.keys[j] for j in keep]
        self.temps, self.top_ps = self.temps[sel], self.top_ps[sel]
        sel = sel.to(self.dev)
        self.attn, self.pos, self.logits = self.attn[sel], self.pos[sel], self.logits[sel]
        lead = 0
        if kvcache.mergeable(self.cache):
            lead = _lead(self.attn)
            self.attn = self.attn[:, lead:]
        kvcache.select_rows(self.cache, sel, lead)
        self.engine.shapes.add("compact", len(keep), size=kvcache.key_width(self.cache))
        if self.lora is not None:
            self.lora.set_rows([r.request.agent for r in self.rows])

    def _clear(self) -> None:
        self.rows, self.keys = [], []
        self.attn = self.pos = self.logits = self.temps = self.top_ps = self.cache = None


def distinct_prompts(rows: Sequence[_Row]) -> tuple[list[int], list[int]]:
    """Rows with the same prompt tokens and adapter prefill once: the index of each distinct (adapter, prompt)'s
    first row, and for every row the position of its own among them."""
    seen: dict[tuple, int] = {}
    first, copy = [], []
    for i, row in enumerate(rows):
        key = (row.request.agent, tuple(row.prompt_ids))
        if key not in seen:
            seen[key] = len(first)
            first.append(i)
        copy.append(seen[key])
    return first, copy


def _lead(mask: torch.Tensor) -> int:
    """Leading positions no row attends to (left padding common to all rows of ``mask`` [B, T])."""
    return int((mask.sum(0) > 0).nonzero()[0])


def _pad_left(mask: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(mask, (width - mask.shape[1], 0), value=0)
