"""Does plain GRPO learn here, and does selfevo's GRPO match TRL's GRPOTrainer on the same task and settings?

    .venv/bin/python benchmarks/ablations/grpo_vs_trl.py [--seeds 0 1 2] [--n 500] [--table-only | --no-train]

Both trainers read the same preset, ``selfevo/configs/grpo/cpu-learn.yaml``: the embedded model, LoRA r/alpha/
dropout on all linear layers, ``arith:train`` (first ``data.limit`` items), the evaluation's own prompt
(``format_prompt``), ``tasks_per_step`` prompts × ``prompt_reuse`` answers per step at the preset's temperature and
token limit, the verifier's 1/0 reward alone, group-normalised advantages, one optimizer step per rollout batch at a
constant learning rate, KL β to the backbone as a k3 loss term, token-mean loss over the step (TRL: ``loss_type=
"dapo"``), truncated answers trained on, micro-batches of ``micro_batch`` rows. TRL sees exactly selfevo's task
batches in selfevo's order (``shuffle_dataset=False`` over the concatenated step batches of the same seed).
Differences that remain: TRL's group std is the sample std (selfevo: population), its weights stay in the model's
dtype with the LoRA weights in float32 (selfevo: the same), and it generates with ``model.generate`` (selfevo: its
continuous-batching engine).

The rows ``grpo`` and ``trl_grpo`` of ``effect.py`` do the work (train per seed, evaluate on the same held-out
items, paired against the untrained model); this script runs them, then writes
``benchmarks/results/grpo_vs_trl.{json,md,png}``: per seed and seed-averaged accuracy, selfevo − TRL paired on the
seed-averaged items, seconds per step, and the training curves of both (reward = verified accuracy, KL, answer
length, seconds per step) on one figure. ``--trl-run DIR SEED`` (what the ``trl_grpo`` row runs) trains TRL once;
it saves a Trainer checkpoint after every step in ``DIR/trainer`` (the previous one removed) and, started again,
continues from the newest (weights, optimizer, RNG: the adapter a straight run gives, tested), as ``resume=true`` does
for selfevo's run.
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
from effect import checkpoint_step, head_to_head, last_checkpoint, over_seeds, spread_cell  # noqa: E402

PRESET = "cpu-learn"
RESULTS = Path("benchmarks/results")
CURVE_KEYS = {"reward": ("reward", "agent0"), "kl": ("train", "agent0", "kl"), "length": ("length_by_role", "solver")}


def preset_config(seed: int, overrides: list[str]):
    """The grpo recipe's preset config (both trainers read their settings from it)."""
    from selfevo.algorithms import grpo
    from selfevo.config import load_config
    return load_config(grpo.GRPOCfg, "grpo", PRESET, [f"seed={seed}", *overrides])


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
        save_strategy="steps", save_steps=1, save_total_limit=1, use_cpu=True, bf16=False, dataloader_num_workers=0)
    if rows % t.micro_batch:
        raise SystemExit(f"tasks_per_step × prompt_reuse ({rows}) must be a multiple of micro_batch ({t.micro_batch})")
    model = models.load_model(cfg.model.backbones[0], dtype=cfg.model.dtype, attn_implementation="sdpa")
    checkpoint = last_checkpoint(out / "trainer")
    timer = StepTimer(out / "metrics.jsonl", done=checkpoint_step(checkpoint))
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=models.load_tokenizer(cfg.model.backbones[0]), callbacks=[timer],
                          peft_config=LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    trainer.model.save_pretrained(str(out / "adapter"))


def _trl_step_line(step: int, logs: dict, seconds: float) -> dict:
    """One TRL log entry in the shape of selfevo's metrics.jsonl (the keys this script and effect.py read)."""
    return {"step": step, "reward": {"agent0": logs.get("reward")}, "train": {"agent0": {"kl": logs.get("kl")}},
            "length_by_role": {"solver": logs.get("completions/mean_length")}, "step_s": round(seconds, 2)}


def StepTimer(path: Path, done: int = 0):  # noqa: N802 - a TrainerCallback built lazily (trl_main imports transformers)
    """A callback that writes one line per optimizer step: TRL's logged reward, KL and length, and the step's wall
    time (TRL generates inside the step). A run resumed after ``done`` steps keeps the lines of those steps and drops
    any later ones (written after the checkpoint it resumes from)."""
    from transformers import TrainerCallback

    class _Timer(TrainerCallback):
        def __init__(self):
            self.start, self.seconds = 0.0, 0.0
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = path.read_text().splitlines() if done and path.exists() else []
            kept = [x for x in lines if x.strip() and json.loads(x)["step"] < done]
            path.write_text("".join(x + "\n" for x in kept))

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds = time.perf_counter() - self.start

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                with path.open("a") as f:
                    f.write(json.dumps(_trl_step_line(state.global_step - 1, logs, self.seconds)) + "\n")

    return _Timer()


# ---- the comparison ------------------------------------------------------------------------------------------------
def curves(run: Path) -> list[dict]:
    """reward, KL, length and seconds per step of one run (either trainer: the same metrics.jsonl shape)."""
    path = run / "metrics.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return [{"step": m["step"], "step_s": m.get("step_s"), **{k: _dig(m, p) for k, p in CURVE_KEYS.items()}}
            for m in lines]


def run_curves(rows: dict, out: Path, kept: dict) -> dict[str, dict[str, list[dict]]]:
    """Per trainer and seed of ``rows`` (effect.json's): the curve of its run folder under ``out``, or the one
    ``kept`` (grpo_vs_trl.json's) where the folder is gone (a new machine has the results, not the runs)."""
    return {k: {s: curves(out / k / f"seed{s}") or kept.get(k, {}).get(s, []) for s in r["per_seed"]}
            for k, r in rows.items()}


def _dig(m: dict, path: tuple[str, ...]):
    for part in path:
        m = m.get(part) if isinstance(m, dict) else None
    return m


def _median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)


def compare(rows: dict, runs: dict[str, dict[str, list[dict]]]) -> dict:
    """Per trainer: accuracy per seed, the seed-averaged change, median seconds per step; and selfevo − TRL on the
    seed-averaged per-item accuracy (only over the seeds both have)."""
    out = {}
    for name, r in rows.items():
        out[name] = {"seeds": r["seeds"], "before": r["before"], "after": r["after"], "diff": r["diff"],
                     "diff_low": r["diff_low"], "diff_high": r["diff_high"], "over_seeds": over_seeds(r["per_seed"]),
                     "accuracy": {s: p["accuracy"] for s, p in r["per_seed"].items()},
                     "s_per_step": {s: _median([c["step_s"] for c in runs[name].get(s, [])])
                                    for s in r["per_seed"]}}
    if {"grpo", "trl_grpo"} <= set(rows) and (h2h := head_to_head(rows["grpo"], rows["trl_grpo"])) is not None:
        out["selfevo_minus_trl"] = h2h
    return out


def table(result: dict) -> str:
    lines = ["| trainer | seeds | after per seed | after (seed-avg) | after − before (paired 95%) | over seeds (t 95%) "
             "| s/step (median over seeds) |", "|---|---|---|---|---|---|---|"]
    for name in ("grpo", "trl_grpo"):
        if name not in result:
            continue
        r = result[name]
        accs = ", ".join(f"{a:.3f}" for a in r["accuracy"].values())
        spread = spread_cell(r.get("over_seeds")) or "–"
        lines.append(f"| {name} | {len(r['seeds'])} | {accs} | {r['after']:.3f} | {r['diff']:+.3f} "
                     f"[{r['diff_low']:+.3f}, {r['diff_high']:+.3f}] | {spread} | "
                     f"{fmt_ci(list(r['s_per_step'].values()), 1)} |")
    text = "\n".join(lines) + "\n"
    trained = [result[k] for k in ("grpo", "trl_grpo") if k in result]
    if trained:
        text += f"\nBefore (the untrained model, greedy): {trained[0]['before']:.3f}.\n"
    if "selfevo_minus_trl" in result:
        h = result["selfevo_minus_trl"]
        spread = spread_cell(h.get("over_seeds"))
        spread = f"; over seeds (t 95%, seed s against seed s) {spread}" if spread else ""
        text += (f"selfevo − TRL (seed-averaged items, seeds {h['seeds']}): {h['diff']:+.3f} "
                 f"[{h['low']:+.3f}, {h['high']:+.3f}]{spread}.\n")
    return text


def plot(runs: dict[str, dict[str, list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("reward", "training reward = verified accuracy"), ("kl", "KL to the backbone (k3)"),
              ("length", "answer length (tokens)"), ("step_s", "seconds per step"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8))
    for ax, (key, title) in zip(axes, panels):
        for name, by_seed in runs.items():
            seeds = [c for c in by_seed.values() if c]
            if seeds:
                plot_bands(ax, seeds, lambda m, k=key: m.get(k), name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1 if key == "reward" else None)  # every panel is >= 0; a band over few seeds may not be
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--n", type=int, default=500, help="held-out arith items")
    ap.add_argument("--out", default="runs/effect", help="effect.py's run folder")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--table-only", action="store_true", help="rebuild from grpo_vs_trl.json alone")
    mode.add_argument("--no-train", action="store_true", help="rebuild from effect.json's rows and the run folders "
                    "there are, training nothing (a seed whose folder is gone keeps its recorded curves)")
    ap.add_argument("--trl-run", nargs=2, metavar=("DIR", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="(with --trl-run) config key=value")
    args = ap.parse_args()
    if args.trl_run:
        return trl_main(Path(args.trl_run[0]), int(args.trl_run[1]), args.overrides)
    path = RESULTS / "grpo_vs_trl.json"
    if args.table_only:
        record = json.loads(path.read_text())
    else:
        if not args.no_train:
            subprocess.run([sys.executable, str(Path(__file__).with_name("effect.py")), "--rows", "grpo", "trl_grpo",
                            "--seeds", *map(str, args.seeds), "--n", str(args.n), "--out", args.out], check=True)
        rows = json.loads((RESULTS / "effect.json").read_text())["methods"]
        rows = {k: rows[k] for k in ("grpo", "trl_grpo") if k in rows}
        kept = json.loads(path.read_text())["curves"] if path.exists() else {}
        runs = run_curves(rows, Path(args.out), kept)
        record = {"preset": PRESET, "result": compare(rows, runs), "curves": runs}
        path.write_text(json.dumps(record) + "\n")
    md = table(record["result"])
    (RESULTS / "grpo_vs_trl.md").write_text(md)
    plot(record["curves"], RESULTS / "grpo_vs_trl.png")
    print(md)


if __name__ == "__main__":
    main()
