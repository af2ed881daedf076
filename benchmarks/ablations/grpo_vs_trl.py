"""Does plain GRPO learn here, and does selfevo's GRPO match TRL's GRPOTrainer on the same task and settings?

    .venv/bin/python benchmarks/ablations/grpo_vs_trl.py [--seeds 0 1 2] [--trl-seeds 0 1 2] [--n 500] [--table-only]

Both trainers read the same preset, ``selfevo/configs/grpo/cpu-learn.yaml``: the embedded model, LoRA r/alpha/
dropout on all linear layers, ``arith:train`` (first ``data.limit`` items), the evaluation's own prompt
(``format_prompt``), ``tasks_per_step`` prompts × ``prompt_reuse`` answers per step at the preset's temperature and
token limit, the verifier's 1/0 reward alone, group-normalised advantages, one optimizer step per rollout batch at a
constant learning rate, KL β to the backbone as a k3 loss term, token-mean loss over the step (TRL: ``loss_type=
"dapo"``), truncated answers trained on, micro-batches of ``micro_batch`` rows. TRL sees exactly selfevo's task
batches in selfevo's order (``shuffle_dataset=False`` over the concatenated step batches of the same seed).

1. selfevo: ``selfevo run grpo --preset cpu-learn seed=S`` in ``<out>/selfevo/seed<S>`` (resumable).
2. TRL: ``GRPOTrainer`` in a subprocess of this script (``--trl-run DIR SEED``), its adapter saved to
   ``<out>/trl/seed<S>/adapter``, its per-step log (reward, KL, length, seconds) to ``metrics.jsonl`` there.
3. Each adapter and the untrained model: ``selfevo eval benchmark=arith setup=vanilla`` greedy on the first ``--n``
   held-out items (the same command and batch composition for every model).

Writes ``benchmarks/results/grpo_vs_trl.{json,md,png}`` (per seed and seed-averaged; curves of reward = verified
accuracy, KL and length per step, both trainers on one figure) and the rows ``grpo`` and ``trl_grpo`` of
``benchmarks/results/effect.json`` (the paired interval of the seed-averaged per-item accuracy against the untrained
model; other rows kept).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import fmt_ci, plot_bands  # noqa: E402
from effect import evaluate, row  # noqa: E402

from selfevo.stats import paired_difference  # noqa: E402

PRESET = "cpu-learn"
RESULTS = Path("benchmarks/results")


def preset_config(seed: int, overrides: list[str]):
    """The grpo recipe's preset config (both trainers read their settings from it)."""
    from selfevo.algorithms import grpo
    from selfevo.config import load_config
    return load_config(grpo.Config, "grpo", PRESET, [f"seed={seed}", *overrides])


# ---- training -----------------------------------------------------------------------------------------------------
def train_selfevo(out: Path, seed: int, overrides: list[str], run: bool) -> str:
    cmd = [sys.executable, "-m", "selfevo.cli", "run", "grpo", "--preset", PRESET, f"seed={seed}",
           f"output_dir={out}", *overrides]
    if run and not (out / "adapters" / "final").exists():
        resume = ["resume=true"] if (out / "metrics.jsonl").exists() else []
        print("+", " ".join(cmd + resume), flush=True)
        subprocess.run(cmd + resume, check=True)
    return "selfevo " + " ".join(cmd[3:])


def train_trl(out: Path, seed: int, overrides: list[str], run: bool) -> str:
    cmd = [sys.executable, __file__, "--trl-run", str(out), str(seed), *overrides]
    if run and not (out / "adapter" / "adapter_config.json").exists():
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return "python " + " ".join(cmd[1:])


def trl_main(out: Path, seed: int, overrides: list[str]) -> None:
    """TRL's GRPOTrainer with the preset's settings on selfevo's task batches (see the module docstring)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from selfevo import models
    from selfevo.loop import load_entries, task_batch
    from selfevo.tasks import format_prompt
    from selfevo.verifiers import verify

    cfg = preset_config(seed, overrides)
    t, s, lora = cfg.trainer, cfg.sampling, cfg.model.lora
    torch.manual_seed(seed)
    tasks = load_entries(list(cfg.data.tasks), cfg.data.limit, cfg.data.data_root, cfg.data.source)
    batches = [task_batch(tasks, step, t.tasks_per_step, cfg.seed) for step in range(t.max_steps)]
    order = [task for batch in batches for task in batch]
    by_id = {task.id: task for task in order}
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": format_prompt(task)}], "task_id": task.id}
                              for task in order])

    def reward(completions, task_id, **_):
        return [verify(by_id[i], c[0]["content"]).score for c, i in zip(completions, task_id)]

    rows = t.tasks_per_step * t.prompt_reuse
    args = GRPOConfig(
        output_dir=str(out / "trainer"), per_device_train_batch_size=t.micro_batch,
        gradient_accumulation_steps=rows // t.micro_batch, num_generations=t.prompt_reuse,
        max_completion_length=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, top_k=0,
        max_steps=t.max_steps, learning_rate=t.lr, lr_scheduler_type="constant", beta=t.kl_coef,
        epsilon=t.clip_eps, loss_type="dapo", scale_rewards="group", mask_truncated_completions=t.mask_truncated,
        num_iterations=t.epochs, max_grad_norm=t.max_grad_norm, adam_beta1=t.adam_beta1, adam_beta2=t.adam_beta2,
        weight_decay=t.weight_decay, shuffle_dataset=False, seed=seed, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, bf16=False, dataloader_num_workers=0)
    if rows % t.micro_batch:
        raise SystemExit(f"tasks_per_step × prompt_reuse ({rows}) must be a multiple of micro_batch ({t.micro_batch})")
    model = models.load_model(cfg.model.backbones[0], dtype=cfg.model.dtype, attn_implementation="sdpa")
    timer = StepTimer(out / "metrics.jsonl")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=models.load_tokenizer(cfg.model.backbones[0]), callbacks=[timer],
                          peft_config=LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    trainer.train()
    trainer.model.save_pretrained(str(out / "adapter"))


def _trl_step_line(step: int, logs: dict, seconds: float) -> dict:
    """One TRL log entry in the shape of selfevo's metrics.jsonl keys this script reads."""
    return {"step": step, "reward": {"agent0": logs.get("reward")}, "kl": logs.get("kl"),
            "length": logs.get("completions/mean_length"), "step_s": round(seconds, 2)}


def StepTimer(path: Path):  # noqa: N802 - a TrainerCallback built lazily (transformers is imported by trl_main)
    """A callback that writes one line per optimizer step: TRL's logged reward, KL and length, and the step's wall
    time (TRL generates inside the step)."""
    from transformers import TrainerCallback

    class _Timer(TrainerCallback):
        def __init__(self):
            self.start, self.seconds = 0.0, 0.0
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds = time.perf_counter() - self.start

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                with path.open("a") as f:
                    f.write(json.dumps(_trl_step_line(state.global_step - 1, logs, self.seconds)) + "\n")

    return _Timer()


# ---- reading runs -------------------------------------------------------------------------------------------------
def selfevo_curve(m: dict) -> dict:
    """A selfevo metrics line as (reward, kl, length, seconds)."""
    train = (m.get("train") or {}).get("agent0") or {}
    return {"step": m["step"], "reward": m["reward"]["agent0"], "kl": train.get("kl"),
            "length": m["length_by_role"].get("solver"), "step_s": m.get("step_s")}


def read_run(path: Path, convert) -> list[dict]:
    if not path.exists():
        return []
    return [convert(json.loads(x)) for x in path.read_text().splitlines() if x.strip()]


def seed_average(items: list[list[float]]) -> list[float]:
    """Per-item mean correctness over seeds (each list in the same held-out order)."""
    return [sum(col) / len(col) for col in zip(*items)]


def summarise(name: str, before: list[float], per_seed: dict[int, list[float]], curves: dict[int, list[dict]],
              commands: dict[int, str]) -> dict | None:
    """One trainer's row: per-seed accuracy and paired change, and the change of the seed-averaged per-item
    accuracy (``effect.json`` row fields)."""
    seeds = sorted(per_seed)
    if not seeds:
        return None
    avg = seed_average([per_seed[s] for s in seeds])
    seconds = {s: [c["step_s"] for c in curves.get(s, []) if c.get("step_s")] for s in seeds}
    per = {str(s): {"accuracy": sum(per_seed[s]) / len(per_seed[s]),
                    "diff": paired_difference(before, per_seed[s]), "command": commands[s],
                    "steps": len(curves.get(s, [])), "train_s": round(sum(seconds[s]), 1),
                    "s_per_step_median": _median(seconds[s])} for s in seeds}
    r = row(before, avg, agent="agent0", seeds=seeds, per_seed=per, command=commands[seeds[0]],
            train_s=round(sum(p["train_s"] for p in per.values()) / len(per), 1))
    r["trainer"] = name
    return r


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)


# ---- output ---------------------------------------------------------------------------------------------------------
def table(rows: dict, head_to_head: dict | None) -> str:
    lines = ["| trainer | seeds | accuracy per seed | after (seed-avg) | after − before (paired 95%) | "
             "s/step (median) |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        per = r["per_seed"]
        accs = ", ".join(f"{p['accuracy']:.3f}" for p in per.values())
        secs = fmt_ci([p["s_per_step_median"] for p in per.values()], 1)
        lines.append(f"| {name} | {len(per)} | {accs} | {r['after']:.3f} | {r['diff']:+.3f} [{r['diff_low']:+.3f}, "
                     f"{r['diff_high']:+.3f}] (+{r['improved']}/−{r['worsened']}) | {secs} |")
    before = next(iter(rows.values()))["before"] if rows else None
    text = "\n".join(lines) + f"\n\nBefore (untrained, greedy): {before:.3f}.\n" if rows else "no runs yet\n"
    if head_to_head:
        text += (f"selfevo − TRL (seed-averaged, paired): {head_to_head['diff']:+.3f} [{head_to_head['low']:+.3f}, "
                 f"{head_to_head['high']:+.3f}].\n")
    return text


def plot(curves: dict[str, dict[int, list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("reward", "training reward = verified accuracy"), ("kl", "KL to the backbone (k3)"),
              ("length", "answer length (tokens)"), ("step_s", "seconds per step"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8))
    for ax, (key, title) in zip(axes, panels):
        for name, runs in curves.items():
            runs = [r for r in runs.values() if r]
            if runs:
                plot_bands(ax, runs, lambda m, k=key: m.get(k) if k != "reward" else m["reward"]["agent0"], name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def merge_effect(rows: dict) -> None:
    """Put ``rows`` into ``benchmarks/results/effect.json`` and its table, keeping the other rows."""
    from effect import BENCH, EVAL, table as effect_table
    path = RESULTS / "effect.json"
    record = json.loads(path.read_text()) if path.exists() else {"benchmark": BENCH, "eval": EVAL, "methods": {}}
    record["methods"].update(rows)
    path.write_text(json.dumps(record) + "\n")
    (RESULTS / "effect.md").write_text(effect_table(record["methods"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2], help="selfevo training seeds")
    ap.add_argument("--trl-seeds", nargs="*", type=int, default=[0, 1, 2], help="TRL training seeds")
    ap.add_argument("--n", type=int, default=500, help="held-out arith items")
    ap.add_argument("--out", default="runs/grpo_vs_trl")
    ap.add_argument("--table-only", action="store_true", help="only read what is there")
    ap.add_argument("--trl-run", nargs=2, metavar=("DIR", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="config key=value for both trainers")
    args = ap.parse_args()
    if args.trl_run:
        return trl_main(Path(args.trl_run[0]), int(args.trl_run[1]), args.overrides)
    out, run = Path(args.out), not args.table_only
    before = evaluate(Path("runs/effect/base"), args.n, [], run)
    if before is None:
        raise SystemExit("no evaluation of the untrained model yet (run without --table-only)")
    trainers = {"grpo": (train_selfevo, args.seeds, "adapters/final/agent0", selfevo_curve),
                "trl_grpo": (train_trl, args.trl_seeds, "adapter", lambda m: m)}
    rows, items, curves = {}, {}, {}
    for name, (train, seeds, adapter_at, convert) in trainers.items():
        per_seed, commands, curves[name] = {}, {}, {}
        for seed in seeds:
            where = out / name / f"seed{seed}"
            commands[seed] = train(where, seed, args.overrides, run)
            curves[name][seed] = read_run(where / "metrics.jsonl", convert)
            adapter = where / adapter_at
            after = evaluate(where / "eval", args.n, [f"adapters=[{adapter}]"], run and adapter.exists())
            if after is not None:
                per_seed[seed] = after
        if (r := summarise(name, before, per_seed, curves[name], commands)) is not None:
            rows[name], items[name] = r, r["after_items"]
    h2h = paired_difference(items["trl_grpo"], items["grpo"]) if len(items) == 2 else None
    md = table(rows, h2h)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "grpo_vs_trl.json").write_text(json.dumps({"preset": PRESET, "overrides": args.overrides,
                                                          "rows": rows, "selfevo_minus_trl": h2h,
                                                          "curves": curves}) + "\n")
    (RESULTS / "grpo_vs_trl.md").write_text(md)
    plot(curves, RESULTS / "grpo_vs_trl.png")
    merge_effect(rows)
    print(md)


if __name__ == "__main__":
    main()
