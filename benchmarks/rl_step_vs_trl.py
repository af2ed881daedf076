"""End-to-end RL step throughput: selfevo REINFORCE++ vs TRL's GRPOTrainer, same model, dtype, LoRA and budget.

    .venv/bin/python -m benchmarks.rl_step_vs_trl [--steps 4] [--completions 8] [--tokens 128] [--dtype bfloat16]
        [--checkpointing on|off] [--no-shared-prompts] [--task gsm8k|arith] [--optimizer reinforce_pp|grpo]
        [--out rl_step_vs_trl]

Both sides: the embedded model, LoRA r=16 (alpha 32, all linear layers), --completions / 4 prompts of --task's
training split (default GSM8K) × 4 completions of at most --tokens tokens per step, the math verifier as reward, one parameter update per rollout batch,
gradient checkpointing as --checkpointing on both sides (on: TRL's GRPOConfig default and selfevo's
``trainer.gradient_checkpointing`` default). selfevo runs its trainer defaults otherwise (``trainer.shared_prompts``:
a prompt's 4 completions run the prompt's forward once in the update; ``--no-shared-prompts`` turns it off).
Reported: generated tokens per second over whole steps (rollout + reward + update), the first step excluded as
warm-up.
Keys: selfevo_tok_s, trl_grpo_tok_s, ratio, selfevo_step_s, trl_step_s (every step's seconds), selfevo_update_s
(the update's share of each step), selfevo_mean_reward and selfevo_rows_left_out (per step: the mean reward, and
the rows the update did not run because their advantage is 0 — REINFORCE++ whitens over the whole batch, so that is
every row of a step whose rewards are all equal, none otherwise) and ratio_bound_by_update (TRL's median step over
selfevo's median update: the ratio an instantaneous rollout would give, i.e. the most that generation speed alone
can reach). Writes
results/rl_step_vs_trl.json (``--out`` to name it otherwise).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import TrainerCallback

from benchmarks.common import gsm8k_prompts, machine, save

from selfevo import models
from selfevo.engines.hf import HFEngine
from selfevo.policy import LoraSettings, PolicyStore, StoreSettings, SeqBatch
from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, Samples
from selfevo.tasks import format_prompt, load_tasks
from selfevo.types import Request, SamplingParams
from selfevo.verifiers import verify

MODEL = "smollm2-135m-instruct"
PER_PROMPT = 4


def selfevo_run(tasks, args) -> tuple[float, list[float], list[float], dict]:
    cfg = TrainerCfg(gradient_checkpointing=args.checkpointing == "on", shared_prompts=args.shared_prompts)
    store = PolicyStore(StoreSettings(dtype=args.dtype, lora=LoraSettings(r=16, alpha=32), lr=1e-5, micro_batch=8,
                                      gradient_checkpointing=cfg.gradient_checkpointing,
                                      shared_prompts=cfg.shared_prompts))
    store.add_agent("agent", MODEL)
    engine = HFEngine(store)
    sp = SamplingParams(max_new_tokens=args.tokens, temperature=1.0)
    n_prompts = args.completions // PER_PROMPT
    tokens, steps, updates, rewarded, left_out = 0, [], [], [], []
    for step in range(args.steps):
        batch_tasks = tasks[step * n_prompts:(step + 1) * n_prompts]
        start = time.perf_counter()
        reqs = [Request("agent", [{"role": "user", "content": format_prompt(t)}], sp, seed=step * 100 + k)
                for t in batch_tasks for k in range(PER_PROMPT)]
        outs = engine.generate(reqs)
        rewards = torch.tensor([verify(t, o.text).score for t, o in zip(
            [t for t in batch_tasks for _ in range(PER_PROMPT)], outs)])
        batch = SeqBatch.build([o.prompt_ids for o in outs], [o.token_ids for o in outs],
                               store.backbones[MODEL].tokenizer.pad_token_id)
        update = time.perf_counter()
        stats = OPTIMIZERS.get(args.optimizer)(cfg)(store, "agent", Samples(batch, rewards))
        steps.append(time.perf_counter() - start)
        updates.append(time.perf_counter() - update)
        rewarded.append(float(rewards.mean()))
        left_out.append(stats["rows_left_out"])
        print(f"selfevo step {step}: {steps[-1]:.1f} s (update {updates[-1]:.1f} s; mean reward {rewarded[-1]:.3f}, "
              f"{left_out[-1]} of {len(outs)} rows without a gradient left out)", flush=True)
        if step > 0:
            tokens += sum(len(o.token_ids) for o in outs)
    return tokens / sum(steps[1:]), steps, updates, {"selfevo_mean_reward": rewarded, "selfevo_rows_left_out": left_out}


def trl_run(tasks, args) -> tuple[float, list[float]]:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    tok = models.load_tokenizer(MODEL)
    model = models.load_model(MODEL, dtype=args.dtype, attn_implementation="sdpa")
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": format_prompt(t)}], "reference": t.reference}
                              for t in tasks])
    by_ref = {t.reference: t for t in tasks}

    def reward(completions, reference, **_):
        return [verify(by_ref[r], c[0]["content"]).score for c, r in zip(completions, reference)]

    timer = _StepTimer()
    cfg = GRPOConfig(output_dir="/tmp/selfevo-trl-bench", per_device_train_batch_size=args.completions,
                     num_generations=PER_PROMPT, max_completion_length=args.tokens, max_steps=args.steps,
                     learning_rate=1e-5, beta=0.0, temperature=1.0, logging_steps=1, report_to="none",
                     save_strategy="no", use_cpu=True, bf16=False, gradient_accumulation_steps=1,
                     gradient_checkpointing=args.checkpointing == "on",
                     dataloader_num_workers=0, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok,
                          peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"), callbacks=[timer])
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    tokens = sum(lengths[1:]) * args.completions
    return tokens / sum(timer.seconds[1:]), timer.seconds


class _StepTimer(TrainerCallback):
    """Wall time of each parameter update (TRL generates inside the step)."""

    def __init__(self):
        self.seconds, self._t = [], 0.0

    def on_step_begin(self, *a, **k):
        self._t = time.perf_counter()

    def on_step_end(self, *a, **k):
        self.seconds.append(time.perf_counter() - self._t)


def update_bound(trl_steps: list[float], updates: list[float]) -> float:
    """The step-time ratio selfevo would reach with a rollout that took no time at all: TRL's median step over
    selfevo's median update (first steps excluded as warm-up): what faster generation alone can reach."""
    return round(statistics.median(trl_steps[1:]) / statistics.median(updates[1:]), 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--checkpointing", choices=("on", "off"), default="on",
                    help="gradient checkpointing on both sides (default on: both libraries' default)")
    ap.add_argument("--no-shared-prompts", dest="shared_prompts", action="store_false",
                    help="selfevo: run every completion's prompt in the update (trainer.shared_prompts=false)")
    ap.add_argument("--task", default="gsm8k", help="training split of this benchmark (gsm8k: the 135M model scores "
                    "0 on all 64 answers of each of the first 3 steps, a step without signal; arith: ~10%% right)")
    ap.add_argument("--optimizer", default="reinforce_pp", choices=("reinforce_pp", "grpo"),
                    help="selfevo's side (grpo: group-normalised like TRL's)")
    ap.add_argument("--out", default="rl_step_vs_trl", help="results/<out>.json")
    args = ap.parse_args()
    tasks = load_tasks(args.task, "train", limit=args.steps * args.completions // PER_PROMPT + 4)
    result = {"model": MODEL, "task": args.task, "optimizer": args.optimizer, "dtype": models.resolve_dtype(args.dtype), "steps": args.steps, "completions_per_step": args.completions,
              "max_new_tokens": args.tokens, "checkpointing": args.checkpointing,
              "shared_prompts": args.shared_prompts}
    rate, steps, updates, rows = selfevo_run(tasks, args)
    result["selfevo_tok_s"], result["selfevo_step_s"] = round(rate, 1), [round(s, 1) for s in steps]
    result["selfevo_update_s"] = [round(s, 1) for s in updates]
    result.update(rows)
    rate, steps = trl_run(tasks, args)
    result["trl_grpo_tok_s"], result["trl_step_s"] = round(rate, 1), [round(s, 1) for s in steps]
    result["ratio"] = round(result["selfevo_tok_s"] / result["trl_grpo_tok_s"], 2)
    result["ratio_bound_by_update"] = update_bound(result["trl_step_s"], updates)
    result["machine"] = machine()
    save(args.out, result)


if __name__ == "__main__":
    main()
