"""Operations one update dispatches: what bounds it where each operation costs a launch (a GPU at small models).

    .venv/bin/python -m benchmarks.update_ops [--layers 30] [--prompts 8] [--per-prompt 8] [--micro-batches 8 64]
                                              [--out update_ops]

One GRPO update (KL to the base as a loss term, gradient checkpointing, shared-prompt packing: the trainer's
defaults) of ``--prompts`` x ``--per-prompt`` rows (prompt 70 tokens, completions 30-199, seeded: ``common.grpo_samples``), on a model of
SmolLM2-135M's depth (``--layers``) and tiny width, so that counting is quick: the operations are the same at any
width. Counted: every ATen operation the update dispatches (forward, recomputation and backward, views included),
once per ``trainer.packed_attention`` (ranges, mask) and micro-batch. On a GPU each costs a launch and Python's
dispatch, ~20-60 us, whatever its size; an H100 spent 20-31 s per update of this shape on the embedded model
(docs/scale.md), about what 377k operations cost at ~55 us. The counts do not depend on the machine; no time is
reported (the CPU's time is arithmetic, not launches). Writes results/update_ops.json (``--out`` to rename).
"""
from __future__ import annotations

import argparse
import collections
import shutil
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import grpo_samples, machine, save

from selfevo import models
from selfevo.optimizers import OPTIMIZERS, Samples
from selfevo.optimizers.trainer import TrainerCfg
from selfevo.policy import LoraSettings, PolicyStore, StoreSettings


class Count(TorchDispatchMode):
    """Counts the ATen operations dispatched inside it, by name."""

    def __init__(self):
        super().__init__()
        self.n: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def deep_tiny(folder: Path, layers: int) -> Path:
    """tiny-random (SmolLM2's tokenizer, width 64) with ``layers`` decoder layers."""
    from transformers import LlamaForCausalLM

    src = Path(models.resolve("tiny-random"))
    cfg = models.tiny_config(49152)
    cfg.num_hidden_layers = layers
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(src / name, folder / name)
    return folder


def count(model: Path, attention: str, micro_batch: int, samples: Samples) -> dict:
    torch.manual_seed(0)
    store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=16, alpha=32), lr=1e-4,
                                      micro_batch=micro_batch, shared_prompts=True, gradient_checkpointing=True,
                                      packed_attention=attention))
    store.add_agent("a0", str(model))
    update = OPTIMIZERS.get("grpo")(TrainerCfg(kl_coef=0.04, kl_in_reward=False))
    update(store, "a0", samples)  # first use: lazy initialisations left out of the count
    counter = Count()
    with counter:
        update(store, "a0", samples)
    top = dict(counter.n.most_common(6))
    return {"attention": attention, "micro_batch": micro_batch, "ops": sum(counter.n.values()),
            "micro_batches": len(store.micro_batches(samples.batch)), "top": top}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--per-prompt", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--out", default="update_ops")
    args = ap.parse_args()
    samples = grpo_samples(args.prompts, args.per_prompt, prompt_len=70, lengths=(30, 200), ids=(10, 1000))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = deep_tiny(Path(tmp) / "deep-tiny", args.layers)
        for mb in args.micro_batches:
            for attention in ("ranges", "mask"):
                rows.append(count(model, attention, mb, samples))
                print(f"packed_attention={attention:6} micro_batch={mb:3}: {rows[-1]['ops']:8,} operations "
                      f"({rows[-1]['micro_batches']} micro-batches)", flush=True)
    base = rows[0]["ops"]
    for r in rows:
        r["vs_first"] = round(base / r["ops"], 2)
    save(args.out, {"layers": args.layers, "rows_per_update": args.prompts * args.per_prompt,
                    "tokens": int(samples.batch.attention_mask.sum()), "counts": rows, "machine": machine()})


if __name__ == "__main__":
    main()
