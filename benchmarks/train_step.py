"""One LoRA policy-gradient update of the policy store on the embedded model: 32 sequences × 256 tokens.

    .venv/bin/python -m benchmarks.train_step [--seqs 32] [--len 256] [--micro-batch 8] [--repeats 2]
                                              [--dtype bfloat16|float32] [--checkpointing-cost]

Keys: train_tok_s (selfevo: PolicyStore.update with a REINFORCE++-style clipped loss, forward + backward + AdamW),
achieved_gflops (4 × all parameters × tokens / second: forward plus the activation gradients through the frozen
base; LoRA's own terms are negligible), peak_gflops (a bf16 2048³ matmul, same run), fraction_of_peak, and
naive_peft_tok_s (plain PEFT forward/backward with a full-vocabulary fp32 log-softmax, same batch, same run).
Writes results/train_step.json.

``--checkpointing-cost`` instead times the same update with ``trainer.gradient_checkpointing`` off and on,
interleaved on one store (off, on, off, on, ...; ``--repeats`` pairs after one warm-up pair), and takes each
mode's peak resident size from the kernel's high-water mark, reset before each step (Linux): keys
``checkpointing.{off,on}.{median_s,peak_gib}``, ``time_ratio`` (on / off, the median of the pairs' ratios) and
``peak_saved_gib``. Writes results/train_step_checkpointing.json.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import PeakRSS, machine, save

from selfevo import models
from selfevo.optimizers.objectives import count_tokens, ppo_clip_loss, token_mean
from selfevo.policy import PolicyStore, StoreSettings, SeqBatch

MODEL = "smollm2-135m-instruct"


def peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e9


def make_batch(seqs: int, length: int, prompt: int = 32, seed: int = 0) -> tuple[SeqBatch, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, 40000, (seqs, length), generator=gen).tolist()
    batch = SeqBatch.build([r[:prompt] for r in ids], [r[prompt:] for r in ids], pad_id=2)
    return batch, torch.randn(seqs, generator=gen)


def selfevo_step(store: PolicyStore, batch: SeqBatch, adv: torch.Tensor) -> float:
    batch = batch.with_extras(advantages=adv[:, None] * batch.loss_mask)
    normaliser = count_tokens([batch.loss_mask])

    def loss_fn(logp, mb):
        loss, _ = ppo_clip_loss(logp, logp.detach(), mb.extras["advantages"], mb.loss_mask)
        return token_mean(loss, mb.loss_mask, normaliser)

    start = time.perf_counter()
    store.update("agent", batch, loss_fn)
    return time.perf_counter() - start


def naive_step(peft_model, opt, batch: SeqBatch, adv: torch.Tensor, micro: int) -> float:
    n = batch.loss_mask.sum()
    start = time.perf_counter()
    opt.zero_grad()
    for s in range(0, batch.input_ids.shape[0], micro):
        ids, mask = batch.input_ids[s:s + micro], batch.loss_mask[s:s + micro]
        logits = peft_model(input_ids=ids, attention_mask=batch.attention_mask[s:s + micro]).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        loss = -(adv[s:s + micro, None] * logp * mask[:, 1:]).sum() / n
        loss.backward()
    opt.step()
    return time.perf_counter() - start


def naive_model():
    from peft import LoraConfig, get_peft_model

    base = models.load_model(MODEL, attn_implementation="sdpa")
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    return model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)


def checkpointing_cost(args, batch: SeqBatch, adv: torch.Tensor) -> dict:
    """Interleaved off/on pairs of the same update on one store; peak RSS per mode (VmHWM reset per step)."""
    from benchmarks.recipe_memory import PhasePeaks

    from selfevo.heap import trim

    store = PolicyStore(StoreSettings(dtype=args.dtype, micro_batch=args.micro_batch))
    store.add_agent("agent", MODEL)
    peaks = PhasePeaks()
    times: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(args.repeats + 1):  # the first pair warms up
        for mode in ("off", "on"):
            store.settings.gradient_checkpointing = mode == "on"
            trim()  # the last step's freed heap would count for this one's peak
            with peaks.phase(mode):
                seconds = selfevo_step(store, batch, adv)
            if r:
                times[mode].append(seconds)
    gib = peaks.finish()["phases"]
    out = {m: {"median_s": round(statistics.median(t), 2), "all_s": [round(x, 2) for x in t], "peak_gib": gib[m]}
           for m, t in times.items()}
    ratio = statistics.median(on / off for off, on in zip(times["off"], times["on"]))
    return {"checkpointing": out, "time_ratio": round(ratio, 3),
            "peak_saved_gib": round(gib["off"] - gib["on"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float32"))
    ap.add_argument("--checkpointing-cost", action="store_true")
    args = ap.parse_args()
    batch, adv = make_batch(args.seqs, args.len)
    tokens = args.seqs * args.len
    if args.checkpointing_cost:
        result = {"model": MODEL, "dtype": models.resolve_dtype(args.dtype), "seqs": args.seqs, "len": args.len,
                  "micro_batch": args.micro_batch, "repeats": args.repeats,
                  **checkpointing_cost(args, batch, adv), "machine": machine()}
        save("train_step_checkpointing", result)
        return
    with PeakRSS() as mem:
        store = PolicyStore(StoreSettings(dtype=args.dtype, micro_batch=args.micro_batch))
        store.add_agent("agent", MODEL)
        params = sum(p.numel() for p in store.backbones[MODEL].causal_lm.parameters() if not p.requires_grad)
        selfevo_step(store, batch, adv)  # warm-up
        seconds = min(selfevo_step(store, batch, adv) for _ in range(args.repeats))
    peak = peak_gflops()
    achieved = 4 * params * tokens / seconds / 1e9
    result = {"model": MODEL, "dtype": store.dtype, "seqs": args.seqs, "len": args.len, "micro_batch": args.micro_batch,
              "frozen_params": params, "train_tok_s": round(tokens / seconds, 1),
              "achieved_gflops": round(achieved, 1), "peak_gflops": round(peak, 1),
              "fraction_of_peak": round(achieved / peak, 3), "peak_rss_gib": mem.gib}
    if not args.no_naive:
        del store
        model, opt = naive_model()
        naive_step(model, opt, batch, adv, 8)
        result["naive_peft_tok_s"] = round(tokens / min(naive_step(model, opt, batch, adv, 8)
                                                        for _ in range(args.repeats)), 1)
    result["machine"] = machine()
    save("train_step", result)


if __name__ == "__main__":
    main()
