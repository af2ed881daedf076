"""What the KL costs in an update: GRPO's loss-term KL scores the reference only (since 2026-11-27), not also the
current policy (the pass the KL-in-reward form needs before its advantages).

    .venv/bin/python -m benchmarks.kl_pass [--prompts 4] [--per-prompt 8] [--repeats 3] [--dtype float32]

GRPO cpu-learn's shapes (``selfevo/configs/grpo/cpu-learn.yaml``): groups of ``--per-prompt`` rows sharing a
66-token prompt, completions of 40-128 tokens (random ids; timing only), LoRA r=16, micro-batch 8, β = 0.04 as a loss
term (k3), the trainer's defaults otherwise (gradient checkpointing, shared prompts). Alternates, on one store,
``now`` (the ``grpo`` optimizer as it runs) and ``old`` (the same preceded by the current-policy scoring pass the
code ran before), ``--repeats`` times each; keys ``median.{now,old,score_only}`` (seconds) and ``old_over_now``.
Writes results/kl_pass.json.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import grpo_samples, machine, save

from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, score
from selfevo.policy import LoraSettings, PolicyStore, StoreSettings

MODEL = "smollm2-135m-instruct"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--per-prompt", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = ap.parse_args()
    cfg = TrainerCfg(kl_coef=0.04, kl_estimator="k3", kl_in_reward=False, micro_batch=8, lr=5e-4)
    store = PolicyStore(StoreSettings(dtype=args.dtype, lora=LoraSettings(r=16, alpha=32, dropout=0.0), lr=cfg.lr,
                                      micro_batch=cfg.micro_batch, gradient_checkpointing=cfg.gradient_checkpointing,
                                      shared_prompts=cfg.shared_prompts))
    store.add_agent("agent0", MODEL)
    samples, update = grpo_samples(args.prompts, args.per_prompt), OPTIMIZERS.get("grpo")(cfg)
    runs: dict[str, list[float]] = {"now": [], "old": [], "score_only": []}
    for _ in range(args.repeats):
        for mode in ("now", "old"):
            start = time.perf_counter()
            if mode == "old":
                score(store, "agent0", samples.batch)
                runs["score_only"].append(time.perf_counter() - start)
            update(store, "agent0", samples)
            runs[mode].append(time.perf_counter() - start)
            print(f"{mode}: {runs[mode][-1]:.1f} s", flush=True)
    median = {k: round(statistics.median(v), 2) for k, v in runs.items()}
    save("kl_pass", {"rows": len(samples.rewards), "dtype": args.dtype, "runs": runs, "median": median,
                     "old_over_now": round(median["old"] / median["now"], 3), "machine": machine()})


if __name__ == "__main__":
    main()
