"""Micro-benchmarks that price one forward of each shape a recipe step runs (:class:`step_model.Calibration`).

``calibrate(cfg, grid)`` builds a policy store and an HF engine from a resolved recipe config, as the recipe's loop
does (backbone, dtype, LoRA, one adapter per agent, ``engine.*``, ``trainer.micro_batch``), and measures:

- ``prefill``: one join of the engine's lane (``_Lane._join`` into an empty batch: left padding, the prefill
  forward, the KV cache) of ``rows`` random prompts of ``width`` tokens, agents mixed; with several rows the last
  prompt is one token shorter, so the join takes the padding-mask path as the recipes' joins of unequal prompts do;
- ``decode``: one engine decode step (``_Lane.step``: sampling, bookkeeping, the decode forward) with ``rows`` rows
  and a KV cache whose attention sweeps ``keys`` keys (zero keys written straight into the cache: no prefill
  needed), averaged over ``grid.decode_steps`` steps after one warm-up step;
- ``train``: :func:`selfevo.optimizers.base.policy_update` (the recipes' clipped on-policy step) on one micro-batch
  of ``micro_batch`` rows of ``width`` tokens (the last ``min(max_new_tokens, width // 2)`` of them scored, as a
  completion), less ``optimizer_s``: the same step on one row of 16 tokens (the fixed cost of a parameter update,
  an upper bound: it includes that row's forward and backward);
- ``score``: :func:`selfevo.optimizers.base.score` (no gradients) on the same micro-batch.

One timing per grid point (``repeats`` to take the minimum of more), after one warm-up of each kind.
"""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass

import torch

from benchmarks.step_model import Calibration, Table

from selfevo.engines import build_engine, kvcache
from selfevo.engines.hf import HFEngine, _Lane
from selfevo.loop import build
from selfevo.optimizers.base import policy_update, score
from selfevo.optimizers.trainer import TrainerCfg
from selfevo.policy import SeqBatch
from selfevo.types import Request, SamplingParams

OPTIMIZER_ROW = 16  # tokens of the one-row step that prices a parameter update


@dataclass(frozen=True)
class Grid:
    """The calibration's grid points (see the module doc)."""

    prefill_rows: tuple[int, ...] = (1, 8)
    prefill_widths: tuple[int, ...] = (64, 256, 1024)
    decode_rows: tuple[int, ...] = (1, 4, 8, 16, 32, 64)
    decode_keys: tuple[int, ...] = (128, 512, 1024)
    decode_steps: int = 8
    train_widths: tuple[int, ...] = (128, 256, 512, 1024)
    repeats: int = 1

    def check(self, max_batch: int) -> None:
        """One-line ValueError for a grid the calibration cannot run."""
        for name in ("prefill_rows", "prefill_widths", "decode_rows", "decode_keys", "train_widths"):
            points = getattr(self, name)
            if not points or any(p < 1 for p in points) or list(points) != sorted(set(points)):
                raise ValueError(f"{name}: {list(points)} is not a strictly increasing list of positive integers")
        if self.decode_steps < 1 or self.repeats < 1:
            raise ValueError("decode_steps and repeats must be >= 1")
        if min(self.decode_keys) < 2 * (self.decode_steps + 2):
            raise ValueError(f"decode_keys must be >= {2 * (self.decode_steps + 2)} (2 × (decode_steps + 2))")
        if min(self.prefill_widths) < 2 or min(self.train_widths) < 2:
            raise ValueError("prefill_widths and train_widths must be >= 2")
        if max(self.prefill_rows + self.decode_rows) > max_batch:
            raise ValueError(f"grid rows go up to {max(self.prefill_rows + self.decode_rows)}, the engine's "
                             f"max_batch is {max_batch}")


def check_config(cfg, grid: Grid) -> None:
    """One-line ValueError for a recipe config (or grid) the calibration cannot price."""
    if cfg.engine.name != "hf":
        raise ValueError(f"the step model prices the HF engine's forwards; engine.name is {cfg.engine.name!r}")
    if len(cfg.model.backbones) != 1:
        raise ValueError(f"the step model calibrates one backbone; model.backbones has {len(cfg.model.backbones)}")
    grid.check(cfg.engine.hf.max_batch)


def calibrate(cfg, grid: Grid) -> Calibration:
    """Measure every table of the step model for the recipe config ``cfg`` (see the module doc)."""
    check_config(cfg, grid)
    t = cfg.trainer
    store = build.policy_store(cfg.model)  # the trainer's AdamW and micro-batch; the update's other settings default
    store.settings = dataclasses.replace(store.settings, lr=t.lr, micro_batch=t.micro_batch,
                                         max_grad_norm=t.max_grad_norm, betas=(t.adam_beta1, t.adam_beta2),
                                         weight_decay=t.weight_decay, optim_state_dtype=t.optim_state_dtype)
    agents = int(cfg.get("n_agents", 1) or 1)
    build.add_agents(store, [f"agent{i}" for i in range(agents)], list(cfg.model.backbones))
    engine = build_engine(cfg.engine, store, cfg.model.dtype)
    prefill, decode = rollout_tables(engine, grid, cfg.sampling.max_new_tokens)
    train, scored, optimizer_s = update_tables(store, t.micro_batch, grid, cfg.sampling.max_new_tokens)
    return Calibration(t.micro_batch, prefill, decode, train, scored, optimizer_s)


def _best(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def _clock(device) -> float:
    """``time.perf_counter()`` once the device's queued work is done (CUDA kernels run asynchronously)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# ---- rollout: the engine's joins and decode steps ---------------------------------------------------------------
def rollout_tables(engine: HFEngine, grid: Grid, max_new_tokens: int) -> tuple[Table, Table]:
    store = engine.store
    name = next(iter(store.backbones))
    bb = store.backbones[name]
    agents = [a for a, b in store.agent_backbone.items() if b == name]
    rng = random.Random(0)
    vocab = bb.causal_lm.config.vocab_size
    with torch.inference_mode(), _Lane(engine, bb, name) as lane:
        join = lambda rows, width: _time_join(lane, agents, rows, width, max_new_tokens, rng, vocab)  # noqa: E731
        step = lambda rows, keys: _time_decode(lane, agents, rows, keys, grid.decode_steps)  # noqa: E731
        join(grid.prefill_rows[0], grid.prefill_widths[0])  # warm-up
        step(grid.decode_rows[0], grid.decode_keys[0])
        prefill = [[_best(lambda: join(r, w), grid.repeats) for w in grid.prefill_widths] for r in grid.prefill_rows]
        decode = [[_best(lambda: step(r, k), grid.repeats) for k in grid.decode_keys] for r in grid.decode_rows]
    return (Table((grid.prefill_rows, grid.prefill_widths), _tuples(prefill)),
            Table((grid.decode_rows, grid.decode_keys), _tuples(decode)))


def _request(agents: list[str], i: int, max_new_tokens: int) -> Request:
    sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, ignore_eos=True)
    return Request(agents[i % len(agents)] if agents else None, [], sp, seed=i)


def _time_join(lane: _Lane, agents, rows: int, width: int, max_new_tokens: int, rng: random.Random,
               vocab: int) -> float:
    """Seconds of one join of ``rows`` prompts of ``width`` tokens (the last one shorter by one if several)."""
    lengths = [width] * rows
    if rows > 1:
        lengths[-1] = width - 1
    lane.waiting = [(i, HFEngine._row(_request(agents, i, max_new_tokens),
                                      [rng.randrange(min(100, vocab - 1), vocab) for _ in range(n)]))
                    for i, n in enumerate(lengths)]
    start = _clock(lane.dev)
    lane._join()
    seconds = _clock(lane.dev) - start
    lane._clear()
    return seconds


def _time_decode(lane: _Lane, agents, rows: int, keys: int, steps: int) -> float:
    """Seconds per decode step of ``rows`` rows whose attention sweeps ``keys`` keys (mean over ``steps``)."""
    config = lane.net.config
    cache = kvcache.growing_cache(config, keys)
    growing = isinstance(cache.layers[0], kvcache.GrowingLayer)
    filled = keys // 2 if growing else keys - (steps + 1) // 2 - 1  # growing: capacity max(2 · filled, keys) = keys
    heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    zeros = torch.zeros(rows, heads, filled, head_dim, dtype=lane.net.dtype, device=lane.dev)
    for layer in range(config.num_hidden_layers):
        cache.update(zeros, zeros, layer)
    lane.rows = [HFEngine._row(_request(agents, i, 1 << 30), [0] * filled) for i in range(rows)]
    lane.keys = list(range(rows))
    lane.attn = torch.ones(rows, filled, dtype=torch.long, device=lane.dev)
    lane.pos = torch.full((rows, 1), filled - 1, dtype=torch.long, device=lane.dev)
    lane.logits = torch.zeros(rows, config.vocab_size, device=lane.dev)
    lane.temps, lane.top_ps, lane.cache = torch.ones(rows), torch.ones(rows), cache
    if lane.lora is not None:
        lane.lora.set_rows([r.request.agent for r in lane.rows])
    lane.step()  # warm-up (and the first step's sampling of the zero logits)
    start = _clock(lane.dev)
    for _ in range(steps):
        lane.step()
    seconds = (_clock(lane.dev) - start) / steps
    swept = kvcache.key_width(lane.cache)
    lane._clear()
    if abs(swept - keys) > steps + 1:
        raise RuntimeError(f"decode calibration swept {swept} keys, not about {keys}")
    return seconds


# ---- update: the store's micro-batches ----------------------------------------------------------------------------
def update_tables(store, micro_batch: int, grid: Grid, max_new_tokens: int) -> tuple[Table, Table, float]:
    agent = store.agents()[0]
    vocab = store.backbones[store.agent_backbone[agent]].causal_lm.config.vocab_size
    on_policy = TrainerCfg()  # train_batch 0, epochs 1, no KL: one store.update over the batch

    def step(rows: int, width: int) -> float:
        batch = _batch(rows, width, max_new_tokens, vocab)
        adv = torch.randn(rows, generator=torch.Generator().manual_seed(width))[:, None] * batch.loss_mask
        start = _clock(store.device)
        policy_update(store, agent, batch, adv, on_policy)
        return _clock(store.device) - start

    def scored(width: int) -> float:
        batch = _batch(micro_batch, width, max_new_tokens, vocab)
        start = _clock(store.device)
        score(store, agent, batch)
        return _clock(store.device) - start

    step(micro_batch, grid.train_widths[0])  # warm-up
    scored(grid.train_widths[0])
    optimizer_s = _best(lambda: step(1, OPTIMIZER_ROW), grid.repeats)
    train = [max(_best(lambda: step(micro_batch, w), grid.repeats) - optimizer_s, 0.0) for w in grid.train_widths]
    scores = [_best(lambda: scored(w), grid.repeats) for w in grid.train_widths]
    return (Table((grid.train_widths,), tuple(train)), Table((grid.train_widths,), tuple(scores)), optimizer_s)


def _batch(rows: int, width: int, max_new_tokens: int, vocab: int) -> SeqBatch:
    """``rows`` rows of ``width`` random tokens, the last ``min(max_new_tokens, width // 2)`` scored."""
    gen = torch.Generator().manual_seed(rows * 100_003 + width)
    ids = torch.randint(min(100, vocab - 1), vocab, (rows, width), generator=gen).tolist()
    completion = max(1, min(max_new_tokens, width // 2))
    return SeqBatch.build([r[:-completion] for r in ids], [r[-completion:] for r in ids], pad_id=0)


def _tuples(rows: list[list[float]]) -> tuple:
    return tuple(tuple(r) for r in rows)
