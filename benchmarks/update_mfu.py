"""The policy store's LoRA update on a GPU at the papers' model shapes: tokens per second and model FLOPs
utilisation (MFU). The weights are random (built in memory from each architecture's published config: no hub), so
the numbers are the shapes' cost, not a model's quality.

    python -m benchmarks.update_mfu [--shapes smollm2-135m qwen2.5-3b qwen2.5-7b llama3.1-8b] [--seqs 32] [--len 512]
                                    [--micro-batch 8] [--repeats 3] [--no-checkpointing] [--device cuda]

One update: ``--seqs`` rows of ``--len`` tokens (the first 64 the prompt), a REINFORCE++-style clipped loss,
forward + backward + AdamW of a rank-16 LoRA on every linear layer, bf16, the store's defaults of the recipes
(gradient checkpointing on unless ``--no-checkpointing``). Keys per shape: ``update_s`` (median of ``--repeats``
after one warm-up), ``train_tok_s``, ``model_tflops`` and ``mfu``: the model FLOPs of the update over its time
over the GPU's peak, where the model FLOPs count the forward (2 x linear weights per token, plus causal attention
2 x 2 x layers x heads x head_dim x len/2) and the backward to the activations (the same again: the frozen weights
take no gradient; LoRA's own terms and the recomputation of checkpointing are not counted), and the peak is a bf16
8192^3 matmul measured in the same run (``peak_tflops``; the H100 SXM's datasheet dense bf16 is 989). Writes
results/update_mfu_<device name>.json.
"""
from __future__ import annotations

import argparse
import re
import statistics
import time

import torch

from benchmarks.common import machine, save
from benchmarks.train_step import make_batch, selfevo_step
from selfevo import attention, models
from selfevo.policy import PolicyStore, StoreSettings
from selfevo.policy.store import Backbone

# Published configs (config.json of each model on the hub), the fields that set the cost.
SHAPES = {
    "smollm2-135m": ("LlamaConfig", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                         tie_word_embeddings=True)),
    "qwen2.5-3b": ("Qwen2Config", dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                                       tie_word_embeddings=True)),
    "qwen2.5-7b": ("Qwen2Config", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                       tie_word_embeddings=False)),
    "llama3.1-8b": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                        tie_word_embeddings=False)),
}


def random_model(shape: str, device: str):
    """The shape's causal LM with random bf16 weights, built on ``device`` (selfevo's attention, as load_model)."""
    import transformers

    cls, fields = SHAPES[shape]
    config = getattr(transformers, cls)(max_position_embeddings=4096, **fields)
    attention.register()
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                              attn_implementation=attention.NAME)
    return model.eval()


def model_flops(model, tokens_per_row: int, rows: int) -> float:
    """Forward plus activation-gradient FLOPs of one update (see the module doc)."""
    c = model.config
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head_dim = c.hidden_size // c.num_attention_heads
    attn = 2 * 2 * c.num_hidden_layers * c.num_attention_heads * head_dim * tokens_per_row / 2
    return 2 * (2 * linear + attn) * tokens_per_row * rows


def peak_tflops(device: str, n: int = 8192, repeats: int = 20) -> float:
    a, b = (torch.randn(n, n, dtype=torch.bfloat16, device=device) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e12


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(shape: str, args, peak: float) -> dict:
    store = PolicyStore(StoreSettings(dtype="bfloat16", device=args.device, micro_batch=args.micro_batch,
                                      gradient_checkpointing=not args.no_checkpointing))
    model = random_model(shape, store.device)
    flops = model_flops(model, args.len, args.seqs)
    store.backbones[shape] = Backbone(shape, models.load_tokenizer("tiny-random"), model)
    store.add_agent("agent", shape)
    batch, adv = make_batch(args.seqs, args.len, prompt=64)  # on the CPU: the store moves each micro-batch
    times = []
    for r in range(args.repeats + 1):
        sync(store.device)
        seconds = selfevo_step(store, batch, adv)
        sync(store.device)
        if r:
            times.append(seconds)
    median = statistics.median(times)
    out = {"shape": shape, "update_s": round(median, 3), "all_s": [round(t, 3) for t in times],
           "train_tok_s": round(args.seqs * args.len / median), "model_tflops": round(flops / median / 1e12, 1),
           "mfu": round(flops / median / 1e12 / peak, 3),
           "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if store.device.startswith("cuda") else None}
    print(out, flush=True)
    del store, model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    peak = peak_tflops(args.device, 8192 if args.device.startswith("cuda") else 1024, 20 if args.device.startswith("cuda") else 2)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    rows = [measure(s, args, peak) for s in args.shapes]
    save(f"update_mfu_{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}",
         {"device": name, "peak_tflops": round(peak, 1), "seqs": args.seqs, "len": args.len,
          "micro_batch": args.micro_batch, "gradient_checkpointing": not args.no_checkpointing, "rows": rows,
          "machine": machine()})


if __name__ == "__main__":
    main()
