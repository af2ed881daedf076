"""Rollout throughput on the embedded model: 32 prompts × 128 new tokens, every engine path, one run.

    .venv/bin/python -m benchmarks.rollout_throughput [--prompts 32] [--tokens 128] [--naive-prompts 4] [--repeats 3]

Keys: naive_hf_tok_s (transformers generate, one request at a time), hf_base_tok_s, hf_multi_lora_tok_s (4 adapters
mixed in one batch), vllm_base_tok_s, vllm_multi_lora_tok_s, default_engine / default_multi_lora_tok_s (the path the
recipes use for multi-agent rollouts), peak_rss_gib. Every request runs to exactly --tokens tokens (ignore_eos), so
all paths do the same work. Adapters get random B matrices: LoRA compute is real. Every figure is the median of
``--repeats`` timed calls, the paths interleaved. vLLM's CPU LoRA kernels are selfevo's (``vllm_cpu_lora_kernels``:
selfevo, see selfevo/engines/vllm_cpu_lora.py) unless ``SELFEVO_VLLM_CPU_LORA=0`` (vllm: its own). Writes
results/rollout_throughput.json (``--out`` to name it otherwise).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from benchmarks.common import PeakRSS, gsm8k_prompts, machine, save

from selfevo.config import EngineCfg
from selfevo.engines import make_engine
from selfevo.engines.base import render_prompt
from selfevo.policy import PolicyStore, StoreSettings
from selfevo.types import Request, SamplingParams

MODEL = "smollm2-135m-instruct"
AGENTS = ["a0", "a1", "a2", "a3"]


def requests(prompts, agents, tokens: int) -> list[Request]:
    sp = SamplingParams(max_new_tokens=tokens, temperature=1.0, ignore_eos=True)
    return [Request(agents[i % len(agents)], [{"role": "user", "content": p}], sp, seed=i) for i, p in enumerate(prompts)]


def timed(engine, reqs, warm: bool = True) -> float:
    if warm:
        engine.generate(reqs[:2])  # warm-up (allocations, adapter loads)
    start = time.perf_counter()
    outs = engine.generate(reqs)
    seconds = time.perf_counter() - start
    return round(sum(len(o.token_ids) for o in outs) / seconds, 1)


def medians(engines: dict, workloads: dict, repeats: int) -> dict:
    """{name: median tok/s} over ``repeats`` rounds, every (engine, workload) pair once per round."""
    runs: dict[str, list[float]] = {name: [] for name in workloads}
    for r in range(repeats):
        for name, (engine, reqs) in workloads.items():
            runs[name].append(timed(engines[engine], reqs, warm=r == 0))
    return {name: round(statistics.median(v), 1) for name, v in runs.items()}


def naive(store: PolicyStore, prompts, tokens: int) -> float:
    """Plain transformers ``generate``, one request at a time, base model."""
    bb = store.backbones[MODEL]
    total, seconds = 0, 0.0
    for p in prompts:
        ids = torch.tensor([render_prompt(bb.tokenizer, [{"role": "user", "content": p}])])
        start = time.perf_counter()
        with torch.inference_mode(), bb.model.disable_adapter():
            out = bb.causal_lm.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                                        pad_token_id=bb.tokenizer.pad_token_id)
        seconds += time.perf_counter() - start
        total += out.shape[1] - ids.shape[1]
    return round(total / seconds, 1)


def build_store() -> PolicyStore:
    torch.manual_seed(0)
    store = PolicyStore(StoreSettings(dtype="bfloat16"))
    for a in AGENTS:
        store.add_agent(a, MODEL)
    for agent in AGENTS:
        for name, p in store.backbones[MODEL].model.named_parameters():
            if f".{agent}." in name and "lora_B" in name:
                torch.nn.init.normal_(p.data, std=0.01)
        store.versions[agent] += 1
    return store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--naive-prompts", type=int, default=4)
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="rollout_throughput")
    args = ap.parse_args()
    prompts = gsm8k_prompts(args.prompts)
    result: dict = {"model": MODEL, "prompts": args.prompts, "new_tokens": args.tokens, "repeats": args.repeats}
    base, mixed = requests(prompts, [None], args.tokens), requests(prompts, AGENTS, args.tokens)
    with PeakRSS() as mem:
        store = build_store()
        result["naive_hf_tok_s"] = naive(store, prompts[:args.naive_prompts], args.tokens)
        engines = {"hf": make_engine("hf", store)}
        workloads = {"hf_base_tok_s": ("hf", base), "hf_multi_lora_tok_s": ("hf", mixed)}
        if not args.no_vllm:
            engines["vllm"] = make_engine("vllm", store, dtype="bfloat16", max_loras=len(AGENTS), max_lora_rank=16,
                                          max_model_len=2048)
            workloads.update({"vllm_base_tok_s": ("vllm", base), "vllm_multi_lora_tok_s": ("vllm", mixed)})
            result["vllm_cpu_lora_kernels"] = "vllm" if os.environ.get("SELFEVO_VLLM_CPU_LORA") == "0" else "selfevo"
        result.update(medians(engines, workloads, args.repeats))
        for engine in engines.values():
            engine.close()
    default = EngineCfg().name
    result["default_engine"] = default
    result["default_multi_lora_tok_s"] = result[f"{default}_multi_lora_tok_s"]
    best_base = max(v for k, v in result.items() if k.endswith("_base_tok_s"))
    result["default_vs_best_base"] = round(result["default_multi_lora_tok_s"] / best_base, 3)
    result["default_vs_naive"] = round(result["default_multi_lora_tok_s"] / result["naive_hf_tok_s"], 1)
    result["peak_rss_gib"] = mem.gib
    result["machine"] = machine()
    if "vllm_base_tok_s" in result:
        result["vllm_multi_lora_vs_base"] = round(result["vllm_multi_lora_tok_s"] / result["vllm_base_tok_s"], 3)
    save(args.out, result)


if __name__ == "__main__":
    main()
